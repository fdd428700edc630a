"""What the HTML report embeds: one :class:`~attnflow.results.Attribution` checked and turned into one
JSON payload for the page (text, generation, encoder-decoder and image results alike).

Payload: ``kind``, ``title``, ``model``, ``prediction``, ``params``, ``sources``, ``input_length``,
``targets``, ``target_positions``, ``targets_are_sources`` (text: clicking a token makes it the
target), ``target`` and ``method`` (what the page opens on), ``n_layers``, ``grid`` and ``image``
(a PNG data URI, images only), and per method ``{"name", "targets", "layers", "rows", "note"}`` with
``rows[i][k]`` = computed target ``targets[i]`` at computed layer ``layers[k]`` over every source.
Sink-aware colour scale (:mod:`attnflow.views.scale`): ``special`` (special-token positions) and per
method ``sinks[i]`` / ``sink_shares[i]`` (the dominant source of computed target ``targets[i]`` and its
share of the top layer's row, or null). ``faithfulness``: the result's faithfulness record when it
carries one (``attnflow faithfulness``), else null.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.results import Attribution
from attnflow.views.image import picture
from attnflow.views.scale import sink, sink_share

ORDER = ("raw", "rollout", "flow", "grad-rollout")


# Up to this many numbers an array is embedded as plain JSON (readable, 4 significant digits); above
# it as little-endian float16 in base64: raw + rollout for every target of a 512-token input are
# 3.1 million numbers, 28 MB as JSON text but 8 MB this way, with a relative error below 5e-4.
PLAIN_MAX = 100_000


def _rounded(values: Any) -> Any:
    array = np.asarray(values, dtype=float)
    if array.size > PLAIN_MAX:
        packed = base64.b64encode(array.astype("<f2").tobytes()).decode("ascii")
        return {"dtype": "float16", "shape": list(array.shape), "base64": packed}
    flat = np.char.mod("%.4g", array.ravel()).astype(float)
    return flat.reshape(array.shape).tolist()


def _title(text: str, limit: int = 160) -> str:
    """Page titles are the input text; a 512-token text would bury the controls, so it is cut."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _method_order(names: list[str]) -> list[str]:
    return sorted(names, key=lambda m: (ORDER.index(m) if m in ORDER else len(ORDER), names.index(m)))


def _note(result: Attribution, name: str) -> str:
    """Say which targets a partly computed method covers (the page greys out the rest)."""
    block = result.blocks[name]
    if len(block.targets) == result.n_targets:
        return ""
    what = "position" if result.kind == "text" else "target"
    shown = ", ".join(str(result.target_positions[t] if result.kind == "text" else t) for t in block.targets[:12])
    more = ", ..." if len(block.targets) > 12 else ""
    note = f"{name} was computed for {what}{'s' if len(block.targets) > 1 else ''} {shown}{more} only"
    if name == "flow" and result.kind == "text":
        note += (": flow for every position costs one max-flow per token pair and layer "
                 "(attnflow.explain_maps(..., flow_targets='all') computes it anyway)")
    return note


def _image_uri(image: np.ndarray) -> str:
    from PIL import Image

    pixels = np.clip(np.rint(np.asarray(image, dtype=float) * 255.0), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def payload(result: Any, title: str | None = None) -> dict[str, Any]:
    """The JSON payload the report page reads."""
    if not isinstance(result, Attribution):
        raise AttnflowError(f"cannot make a report from {type(result).__name__}; pass an attnflow result "
                            "(what explain, explain_maps, generate and explain_image return)")
    methods = []
    for name in _method_order(result.methods):
        block = result.blocks[name]
        sinks = [sink(result, name, t) for t in block.targets]
        shares = [None if j is None else round(sink_share(result, name, t), 4) for j, t in zip(sinks, block.targets)]
        methods.append({"name": name, "targets": list(block.targets), "layers": list(block.layers),
                        "rows": _rounded(block.values), "note": _note(result, name), "sinks": sinks,
                        "sink_shares": shares})
    default_title = result.input if isinstance(result.input, str) and result.input else " ".join(result.sources)
    return {
        "kind": result.kind, "title": _title(title or default_title), "model": result.model,
        "prediction": result.prediction, "params": {k: v for k, v in result.params.items()
                                                   if isinstance(v, (str, int, float, bool)) or v is None},
        "sources": list(result.sources), "input_length": result.input_length, "targets": list(result.targets),
        "target_positions": list(result.target_positions), "targets_are_sources": result.kind == "text",
        "target": result.target, "method": result.method, "n_layers": result.n_layers,
        "grid": list(result.grid) if result.grid else None,
        "image": _image_uri(picture(result)) if result.image is not None else None, "methods": methods,
        "special": [int(j) for j in (result.meta or {}).get("special", []) if 0 <= int(j) < result.n_sources],
        "faithfulness": _faithfulness(result),
    }


def _faithfulness(result: Attribution) -> dict | None:
    data = (result.meta or {}).get("faithfulness")
    return data if isinstance(data, dict) and isinstance(data.get("methods"), dict) else None
