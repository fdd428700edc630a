"""What a page may ask for, as tables, and the checks that turn a page's request into api arguments.

The page builds its controls from ``tables`` (``GET /api/options``), so a new weighting, filter
or method is one more row here and nothing else: ``WEIGHTINGS`` maps a name to the keyword arguments
it adds to the api call (``explain_maps``, ``generate``, ``explain_image``); ``FILTERS`` maps a name
to the keyword arguments it adds to ``attnflow.Attribution.top`` when ranking prompt tokens.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from dataclasses import dataclass, field
from typing import Any

from attnflow.api import FLOW_ALL_MAX
from attnflow.api.defaults import PAPER_ONLY
from attnflow.config import registry
from attnflow.config.settings import OPTIONS, choices
from attnflow.errors import AttnflowError

# name -> (label, api keyword arguments) added to explain_maps / generate / explain_image: from Settings.
WEIGHTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    row["name"]: (row["label"], {} if row["name"] == OPTIONS["weighting"].default else {"weighting": row["name"]})
    for row in OPTIONS["weighting"].menu()}

# name -> (label, Attribution.top keyword arguments) for ranking a generated token's prompt tokens.
FILTERS: dict[str, tuple[str, dict[str, Any]]] = {
    "content_only": ("content words only (no punctuation or very common words)", {"content_only": True}),
    "sink": ("leave out the first token (where heads park attention: the attention sink)", {"skip": [0]}),
}

PAGE_KINDS = ("text", "image")


def methods_offered() -> dict[str, tuple[str, ...]]:
    """The methods of each kind, read from the registry when asked (a method registered at run time is
    offered from then on)."""
    return {kind: registry.names(kind) for kind in PAGE_KINDS}
HEAD_FUSIONS = choices("head_fusion")
# decoders: receptive-field normalisation, by menu name ("none" for off)
CAUSAL_NORMS = {row["name"]: value for row, value in zip(OPTIONS["causal_norm"].menu(), choices("causal_norm"))}

MAX_CHARS = 10_000          # text or prompt, in characters
MAX_TEXT_TOKENS = 512       # a report holds every target's scores: 512 tokens is ~8 MB of page
MAX_NEW_TOKENS = 256
MAX_IMAGE_BYTES = 8 * 1024 * 1024


def tables() -> dict[str, Any]:
    """The options a page offers (``GET /api/options``)."""
    return {
        "weightings": [{"name": k, "label": v[0]} for k, v in WEIGHTINGS.items()],
        "filters": [{"name": k, "label": v[0]} for k, v in FILTERS.items()],
        "methods": {k: list(v) for k, v in methods_offered().items()},
        # methods that explain a classifier's predicted class (greyed out for other models)
        "classifier_methods": list(registry.classifiers_only()),
        # ticked when the page opens: every method cheap for any model (not a pass per source token, not a
        # decoder's logit); the rest stay one click away
        "checked": {k: [m for m in v if registry.get(m).cost in (registry.FORWARD, registry.MAX_FLOW)
                        or registry.get(m).classifiers_only] for k, v in methods_offered().items()},
        "head_fusions": list(HEAD_FUSIONS),
        "residual": {"default": OPTIONS["residual"].default, "min": OPTIONS["residual"].bounds[0],
                     "max": OPTIONS["residual"].bounds[1]},
        "causal_norms": list(CAUSAL_NORMS),
        "limits": {"chars": MAX_CHARS, "text_tokens": MAX_TEXT_TOKENS, "new_tokens": MAX_NEW_TOKENS,
                   "image_bytes": MAX_IMAGE_BYTES, "flow_all_tokens": FLOW_ALL_MAX},
    }


def _choice(value: Any, allowed: Any, what: str) -> Any:
    if value not in allowed:
        raise AttnflowError(f"{what} must be one of {', '.join(map(str, allowed))}; got {value!r}")
    return value


def _number(value: Any, what: str, low: float, high: float, integer: bool = False) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AttnflowError(f"{what} must be a number; got {value!r}")
    if integer and value != int(value):
        raise AttnflowError(f"{what} must be a whole number; got {value!r}")
    if not low <= value <= high:
        raise AttnflowError(f"{what} must lie between {low:g} and {high:g}; got {value!r}")
    return int(value) if integer else float(value)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise AttnflowError(f"the {what} is empty; type some text first")
    if len(value) > MAX_CHARS:
        raise AttnflowError(f"the {what} is {len(value):,} characters long; the app takes at most {MAX_CHARS:,}")
    return value


def weighting(body: dict[str, Any]) -> dict[str, Any]:
    name = _choice(body.get("weighting", OPTIONS["weighting"].default), WEIGHTINGS, "weighting")
    return dict(WEIGHTINGS[name][1])


@dataclass
class TextRequest:
    text: str
    methods: list[str]
    head_fusion: str = OPTIONS["head_fusion"].default
    residual: float = OPTIONS["residual"].default
    flow_all: bool = False
    paper_only: bool = PAPER_ONLY  # the paper's methods alone, without the decoder defaults (attnflow.api.defaults)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerateRequest:
    prompt: str
    max_new_tokens: int
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    seed: int = 0
    causal_norm: str | None = None
    head_fusion: str = OPTIONS["head_fusion"].default
    residual: float = OPTIONS["residual"].default
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImageRequest:
    image: Any  # a PIL image
    name: str
    methods: list[str]
    head_fusion: str = OPTIONS["head_fusion"].default
    residual: float = OPTIONS["residual"].default
    extra: dict[str, Any] = field(default_factory=dict)


def _methods(body: dict[str, Any], kind: str, classifier: bool) -> list[str]:
    methods = body.get("methods", [m.name for m in registry.methods(kind) if m.cost == registry.FORWARD])
    if not isinstance(methods, list) or not methods:
        raise AttnflowError("choose at least one method")
    for m in methods:
        _choice(m, registry.names(kind), "method")
    for m in methods:
        if registry.get(m).classifiers_only and not classifier:
            raise AttnflowError(f"{m} explains a classifier's predicted class; this model is not a classifier")
    return list(dict.fromkeys(methods))


def _common(body: dict[str, Any]) -> dict[str, Any]:
    residual = OPTIONS["residual"]
    return {"head_fusion": _choice(body.get("head_fusion", OPTIONS["head_fusion"].default), HEAD_FUSIONS,
                                   "head fusion"),
            "residual": _number(body.get("residual", residual.default), "residual", *residual.bounds),
            "extra": weighting(body)}


def text_request(body: dict[str, Any], classifier: bool) -> TextRequest:
    return TextRequest(text=_text(body.get("text"), "text"), methods=_methods(body, "text", classifier),
                       flow_all=bool(body.get("flow_all", False)),
                       paper_only=bool(body.get("paper_only", PAPER_ONLY)), **_common(body))


def generate_request(body: dict[str, Any]) -> GenerateRequest:
    sample = bool(body.get("sample", False))
    sampling = {} if not sample else dict(  # checked only when used: greedy ignores them
        temperature=_number(body.get("temperature", 1.0), "temperature", 0.01, 10.0),
        top_k=_number(body.get("top_k", 50), "top-k", 0, 100_000, True),
        top_p=_number(body.get("top_p", 1.0), "top-p", 0.01, 1.0),
        seed=_number(body.get("seed", 0), "seed", 0, 2**31 - 1, True))
    if body.get("prompt") is None and isinstance(body.get("text"), str):
        raise AttnflowError("a decoder generates from a prompt: send the text as \"prompt\" (got \"text\"), "
                            "or pick an encoder to explain a text")
    return GenerateRequest(
        prompt=_text(body.get("prompt"), "prompt"),
        max_new_tokens=_number(body.get("max_new_tokens", 8), "the number of new tokens", 1, MAX_NEW_TOKENS, True),
        sample=sample, **sampling,
        causal_norm=CAUSAL_NORMS[_choice(body.get("causal_norm", OPTIONS["causal_norm"].menu()[0]["name"]), CAUSAL_NORMS, "normalisation")],
        **_common(body))


def image_request(body: dict[str, Any], classifier: bool) -> ImageRequest:
    """The image arrives as a ``data:`` URL (what the page's file reader makes)."""
    from PIL import Image, UnidentifiedImageError

    data = body.get("image")
    if not isinstance(data, str) or not data:
        raise AttnflowError("choose an image file first")
    head, _, payload = data.partition(",")
    if not head.startswith("data:") or ";base64" not in head:
        raise AttnflowError("the image must arrive as a base64 data URL")
    if len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise AttnflowError(f"the image is larger than {MAX_IMAGE_BYTES // 2**20} MB")
    try:
        raw = base64.b64decode(payload, validate=True)
        with Image.open(io.BytesIO(raw)) as img:
            img.load()
            image = img.copy()
    except (binascii.Error, UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) \
            as exc:
        raise AttnflowError(f"that file is not an image this server can read ({type(exc).__name__})") from exc
    name = body.get("name")
    name = name[:200] if isinstance(name, str) and name.strip() else "uploaded image"
    return ImageRequest(image=image, name=name, methods=_methods(body, "image", classifier), **_common(body))


def top_options(filters: list[str]) -> dict[str, Any]:
    """Keyword arguments for ``Attribution.top`` from filter names (skips add up)."""
    out: dict[str, Any] = {}
    for name in filters:
        for key, value in FILTERS[_choice(name, FILTERS, "filter")][1].items():
            out[key] = sorted(set(out.get(key, [])) | set(value)) if key == "skip" else value
    return out
