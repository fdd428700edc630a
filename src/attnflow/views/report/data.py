"""What the HTML report embeds: results checked and turned into one JSON payload for the page.

Accepted results: an :class:`Explanation`, a list of Explanations of the same input (one per method,
or one per target), an :class:`ExplanationMaps`, a generation result dict (``"kind": "generation"``),
or the JSON forms of these as ``attnflow explain --json`` and the ``to_dict`` methods write them.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.explanation import Explanation
from attnflow.explanation_maps import FLOW_ALL_MAX, ExplanationMaps

ORDER = ("raw", "rollout", "flow")
GENERATION_KEYS = ("prompt_tokens", "generated_tokens", "method", "M")


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


def _finite(values: Any, what: str, ndim: int) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise AttnflowError(f"{what} must be a {ndim}-d array of numbers (ragged or non-numeric given)") from exc
    if array.ndim != ndim or array.size == 0:
        raise AttnflowError(f"{what} must be a non-empty {ndim}-d array of numbers; got shape {array.shape}")
    if not np.isfinite(array).all():
        raise AttnflowError(f"{what} contains NaN or infinite values")
    return array


def _check_explanation(e: Explanation) -> np.ndarray:
    scores = _finite(e.scores, f"the scores of the {e.method!r} explanation", 2)
    if scores.shape[1] != len(e.tokens):
        raise AttnflowError(f"the {e.method!r} scores have {scores.shape[1]} columns but there are "
                            f"{len(e.tokens)} tokens")
    if not 0 <= int(e.target) < len(e.tokens):
        raise AttnflowError(f"target {e.target} is outside the {len(e.tokens)} tokens")
    return scores


def _title(text: str, limit: int = 160) -> str:
    """Page titles are the input text; a 512-token text would bury the controls, so it is cut."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _method_order(names: list[str]) -> list[str]:
    return sorted(names, key=lambda m: (ORDER.index(m) if m in ORDER else len(ORDER), names.index(m)))


def _payload_from_explanations(explanations: list[Explanation], title: str | None) -> dict[str, Any]:
    if not explanations:
        raise AttnflowError("a report needs at least one explanation")
    first = explanations[0]
    rows: dict[str, dict[int, np.ndarray]] = {}
    for e in explanations:
        scores = _check_explanation(e)
        if list(e.tokens) != list(first.tokens):
            raise AttnflowError("all explanations in one report must be of the same input (their tokens differ)")
        if scores.shape[0] != first.scores.shape[0]:
            raise AttnflowError("all explanations in one report must have the same number of layers")
        rows.setdefault(e.method, {})[int(e.target)] = scores
    n = len(first.tokens)
    methods = []
    for name in _method_order(list(rows)):
        targets = sorted(rows[name])
        note = "" if len(targets) == n else (
            f"{name} was computed for position{'s' if len(targets) > 1 else ''} {', '.join(map(str, targets))} only")
        methods.append({"name": name, "targets": targets, "rows": _rounded([rows[name][t] for t in targets]),
                        "note": note})
    text = first.params.get("text")
    return {"kind": "explanation", "title": _title(title or text or " ".join(first.tokens)),
            "tokens": list(first.tokens),
            "target": int(first.target), "n_layers": int(first.scores.shape[0]), "prediction": first.prediction,
            "model": first.params.get("model"), "methods": methods}


def _payload_from_maps(maps: ExplanationMaps, title: str | None) -> dict[str, Any]:
    explanations = [maps.explanation(m, t) for m in maps.methods for t in maps.computed[m]]
    payload = _payload_from_explanations(explanations, title)
    payload["target"] = int(maps.target)
    for method in payload["methods"]:
        if method["name"] == "flow" and method["note"]:
            method["note"] = (f"flow was computed for position {maps.target} only: flow for every position costs "
                              f"one max-flow per token pair and layer, done by default up to {FLOW_ALL_MAX} tokens "
                              "(explain_maps(..., flow_targets='all') computes it anyway)")
    return payload


def check_generation(data: dict[str, Any]) -> dict[str, Any]:
    """Validate a generation result dict and return the page payload for it."""
    missing = [k for k in GENERATION_KEYS if k not in data]
    if missing:
        raise AttnflowError(f"a generation result needs the keys {', '.join(GENERATION_KEYS)}; missing {missing}")
    prompt, generated = data["prompt_tokens"], data["generated_tokens"]
    if not (isinstance(prompt, list) and isinstance(generated, list) and prompt and generated):
        raise AttnflowError("prompt_tokens and generated_tokens must be non-empty lists of strings")
    m = _finite(data["M"], "M (generated token x prompt token x layer)", 3)
    if m.shape[:2] != (len(generated), len(prompt)):
        raise AttnflowError(f"M must have shape ({len(generated)} generated, {len(prompt)} prompt tokens, layers); "
                            f"got {m.shape}")
    rows = []
    for g, per_layer in enumerate(data.get("rows") or []):
        per_layer = _finite(per_layer, f"rows[{g}] (layer x position)", 2)
        if per_layer.shape[0] != m.shape[2] or per_layer.shape[1] < len(prompt):
            raise AttnflowError(f"rows[{g}] must have {m.shape[2]} layers of at least {len(prompt)} positions; "
                                f"got shape {per_layer.shape}")
        rows.append(_rounded(per_layer))
    if rows and len(rows) != len(generated):
        raise AttnflowError(f"rows must have one entry per generated token ({len(generated)}); got {len(rows)}")
    return {"kind": "generation", "title": _title(data.get("prompt") or " ".join(map(str, prompt))),
            "model": data.get("model"), "method": str(data["method"]), "prompt_tokens": [str(t) for t in prompt],
            "generated_tokens": [str(t) for t in generated], "n_layers": int(m.shape[2]),
            "M": _rounded(m), "rows": rows}


def from_json_value(value: Any) -> Any:
    """A parsed JSON value -> Explanation, list of Explanations, ExplanationMaps or generation dict."""
    if isinstance(value, list):
        if not value or not all(isinstance(v, dict) for v in value):
            raise AttnflowError("a list of results must hold one or more explanation objects")
        return [Explanation.from_dict(v) for v in value]
    if not isinstance(value, dict):
        raise AttnflowError("a result must be a JSON object or a list of objects")
    if value.get("kind") == "generation":
        return value
    if value.get("kind") == "maps":
        return ExplanationMaps.from_dict(value)
    return Explanation.from_dict(value)


def load_result(path: str | Path) -> Any:
    """Read a result JSON file (see the module docstring for the accepted forms)."""
    path = Path(path)
    if not path.is_file():
        raise AttnflowError(f"no such result file: {str(path)!r}")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AttnflowError(f"{str(path)!r} is not valid JSON ({exc})") from exc
    try:
        result = from_json_value(value)
    except (TypeError, ValueError) as exc:  # AttnflowError is a ValueError: keep its message
        if isinstance(exc, AttnflowError):
            raise AttnflowError(f"{str(path)!r}: {exc}") from exc
        raise AttnflowError(f"{str(path)!r} does not hold an attnflow result ({exc})") from exc
    payload(result)  # validate now, so a bad file fails before anything is written
    return result


def payload(result: Any, title: str | None = None) -> dict[str, Any]:
    """The JSON payload the report page reads."""
    if isinstance(result, ExplanationMaps):
        return _payload_from_maps(result, title)
    if isinstance(result, Explanation):
        return _payload_from_explanations([result], title)
    if isinstance(result, dict):
        out = check_generation(result) if result.get("kind") == "generation" else None
        if out is None:
            return payload(from_json_value(result), title)
        if title:
            out["title"] = _title(title)
        return out
    if isinstance(result, (list, tuple)) and all(isinstance(e, Explanation) for e in result):
        return _payload_from_explanations(list(result), title)
    if callable(getattr(result, "to_dict", None)):  # e.g. a Generation, whose to_dict is the generation schema
        return payload(result.to_dict(), title)
    raise AttnflowError(f"cannot make a report from {type(result).__name__}; pass an Explanation, a list of them, "
                        "ExplanationMaps or a generation result")

