"""What the HTML report embeds: one ``Attribution`` checked and turned into one
JSON payload for the page (text, generation, encoder-decoder and image results alike).

Payload: ``kind``, ``title``, ``model``, ``prediction``, ``params``, ``sources``, ``input_length``,
``targets``, ``target_positions``, ``targets_are_sources`` (text: clicking a token makes it the
target), ``target`` and ``method`` (what the page opens on), ``n_layers``, ``grid`` and ``image``
(a PNG data URI, images only), and per method ``{"name", "targets", "layers", "embedded", "rows",
"lazy", "note", "sinks", "sink_shares"}``: ``targets`` are the computed targets, ``rows[i][k]`` is
target ``embedded[i]`` at computed layer ``layers[k]`` over every source.

Long inputs: a report holding every target of a long input would be large (raw and rollout for the
512 targets of a 512-token, 30-layer model are 15.7 million numbers, 42 MB as base64 float16), and
the page would decode all of it before showing anything. Above ``LAZY_ABOVE`` numbers the payload
therefore embeds only what the page opens on (each method's rows for the opening target, as plain
JSON to 4 significant digits) and packs every other target in ``chunks`` of ``CHUNK_TARGETS``
targets, deflate-compressed and base64-encoded, which the page decodes when one of their targets is
clicked (``lazy``: ``{"encoding", "chunks": [{"id", "targets"}]}``; ``report_html`` writes each chunk
into the same file as its own ``<script type="application/octet-stream">`` block). Encodings:

- ``"f16"``: little-endian float16 (relative error < 5e-4), while the chunks hold at most
  ``F16_MAX`` numbers in all;
- ``"log8"`` above that: per (target, layer) row its maximum as float32, then one byte per value on
  a logarithmic scale over ``LOG8_OCTAVES`` octaves below the maximum (relative error < 2.8 %;
  values under ``2**-20`` of the row's maximum read as 0), each layer's bytes stored as differences
  from the layer below (mod 256). The page colours by the value over the
  row's maximum, which this keeps to well under one colour step; it says when it shows such values.

Sink-aware colour scale (``attnflow.views.scale``): ``special`` (special-token positions) and per
method ``sinks[i]`` / ``sink_shares[i]`` (the dominant source of computed target ``targets[i]`` and its
share of the top layer's row, or null). ``faithfulness``: the result's faithfulness record when it
carries one (``attnflow faithfulness``), else null. ``causal``: a decoder's text result (the page's
position note then ranks only the sources a target can see; ``attnflow.views.position``).
"""

from __future__ import annotations

import base64
import io
import zlib
from typing import Any

import numpy as np

from attnflow.config import registry
from attnflow.errors import AttnflowError
from attnflow.results import Attribution
from attnflow.views.image import picture
from attnflow.views.scale import sink_of

ORDER = registry.names()  # the registry's order


# Up to this many numbers an array is embedded as plain JSON (readable, 4 significant digits); above
# it as little-endian float16 in base64: raw + rollout for every target of a 512-token input are
# 3.1 million numbers, 28 MB as JSON text but 8 MB this way, with a relative error below 5e-4.
PLAIN_MAX = 100_000
LAZY_ABOVE = PLAIN_MAX  # numbers in all methods together above which other targets load lazily
CHUNK_TARGETS = 16
F16_MAX = 4_000_000
LOG8_OCTAVES = 20


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
    if registry.fact(name, "rows") == registry.WHILE_CHEAP and result.kind == "text":
        note += (f": {name} for every position costs one max-flow per token pair and layer "
                 "(attnflow.explain_maps(..., flow_targets='all') computes it anyway)")
    return note


def _image_uri(image: np.ndarray) -> str:
    from PIL import Image

    pixels = np.clip(np.rint(np.asarray(image, dtype=float) * 255.0), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def encode_chunk(values: np.ndarray, encoding: str) -> str:
    """``(targets, layers, sources)`` -> base64 of the deflated ``encoding`` (see the module docstring)."""
    values = np.asarray(values, dtype=np.float64)
    if encoding == "f16":
        raw = values.astype("<f2").tobytes()
    else:
        top = values.max(axis=-1, keepdims=True)
        ratio = np.divide(values, top, out=np.zeros_like(values), where=top > 0)
        floor = 2.0 ** -LOG8_OCTAVES
        with np.errstate(divide="ignore"):
            steps = np.round((np.log2(np.maximum(ratio, floor)) + LOG8_OCTAVES) * (254 / LOG8_OCTAVES)) + 1
        codes = np.where(ratio >= floor, np.clip(steps, 1, 255), 0).astype(np.uint8)
        # Stored as differences from the layer below (mod 256): rollout rows change little from one
        # layer to the next, which halves their compressed size on SmolLM2.
        codes[:, 1:] = codes[:, 1:] - codes[:, :-1]
        raw = top.astype("<f4").tobytes() + codes.tobytes()
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def decode_chunk(text: str, encoding: str, shape: tuple[int, int, int]) -> np.ndarray:
    """The inverse of ``encode_chunk`` (what the page does in JavaScript; used by the tests)."""
    raw = zlib.decompress(base64.b64decode(text))
    if encoding == "f16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64).reshape(shape)
    rows = shape[0] * shape[1]
    top = np.frombuffer(raw[: 4 * rows], dtype="<f4").astype(np.float64).reshape(shape[0], shape[1], 1)
    codes = np.cumsum(np.frombuffer(raw[4 * rows:], dtype=np.uint8).reshape(shape), axis=1, dtype=np.uint8)
    codes = codes.astype(np.float64)
    return np.where(codes > 0, top * 2.0 ** ((codes - 1) * (LOG8_OCTAVES / 254) - LOG8_OCTAVES), 0.0)


def _methods(result: Attribution) -> tuple[list[dict[str, Any]], dict[str, str]]:
    names = _method_order(result.methods)
    total = sum(result.blocks[name].values.size for name in names)
    lazy_numbers = sum(result.blocks[name].values.size for name in names if len(result.blocks[name].targets) > 1)
    encoding = "f16" if lazy_numbers <= F16_MAX else "log8"
    methods, chunks = [], {}
    for number, name in enumerate(names):
        block = result.blocks[name]
        found = [sink_of(result, name, t) for t in block.targets]
        sinks = [None if f is None else f[0] for f in found]
        shares = [None if f is None else round(f[1], 4) for f in found]
        record = registry.REGISTRY.get(name)
        entry = {"name": name, "targets": list(block.targets), "layers": list(block.layers),
                 "axis": record is None or record.layers,  # False: one row for the whole model (ablated flow)
                 "note": _note(result, name), "lazy": None, "sinks": sinks, "sink_shares": shares}
        if total <= LAZY_ABOVE or len(block.targets) == 1:
            entry.update(embedded=list(block.targets), rows=_rounded(block.values))
            methods.append(entry)
            continue
        opening = block.targets.index(result.target) if result.target in block.targets else 0
        entry.update(embedded=[block.targets[opening]], rows=_rounded(block.values[opening:opening + 1]))
        rest = [i for i in range(len(block.targets)) if i != opening]
        method_encoding = encoding if float(block.values.min()) >= 0.0 else "f16"  # log8 is for scores >= 0
        entry["lazy"] = {"encoding": method_encoding, "chunks": []}
        for start in range(0, len(rest), CHUNK_TARGETS):
            picked = rest[start:start + CHUNK_TARGETS]
            chunk_id = f"{number}-{start // CHUNK_TARGETS}"
            chunks[chunk_id] = encode_chunk(block.values[picked], method_encoding)
            entry["lazy"]["chunks"].append({"id": chunk_id, "targets": [block.targets[i] for i in picked]})
        methods.append(entry)
    return methods, chunks


def payload(result: Any, title: str | None = None) -> dict[str, Any]:
    """The JSON payload the report page reads (with ``chunks``: id -> packed text, for long inputs)."""
    if not isinstance(result, Attribution):
        raise AttnflowError(f"cannot make a report from {type(result).__name__}; pass an attnflow result "
                            "(what explain, explain_maps, generate and explain_image return)")
    methods, chunks = _methods(result)
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
        "chunks": chunks,
        "special": [int(j) for j in (result.meta or {}).get("special", []) if 0 <= int(j) < result.n_sources],
        "faithfulness": _faithfulness(result),
        "causal": bool((result.meta or {}).get("causal", False)),
    }


def _faithfulness(result: Attribution) -> dict | None:
    data = (result.meta or {}).get("faithfulness")
    return data if isinstance(data, dict) and isinstance(data.get("methods"), dict) else None
