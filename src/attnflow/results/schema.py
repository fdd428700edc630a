"""Result files: one versioned JSON schema and one exact binary form (``.npz``).

JSON (version 2), what ``--json`` and ``Attribution.to_json`` write::

    {"schema": "attnflow.attribution", "version": 2, "kind": "text" | "generation" | "image" | "seq2seq",
     "model": ..., "input": ..., "prediction": ..., "params": {...},
     "sources": [labels], "input_length": m, "targets": [labels], "target_positions": [int | null],
     "target": default target index, "method": default method, "n_layers": L,
     "scores": {method: {"targets": [i, ...], "layers": [l, ...], "values": [[[...]]]}},
     "grid": [rows, cols] | null, "image": {"dtype": "uint8", "shape": [...], "base64": ...} | null,
     "meta": {...}, "original": {as "image"} (images only: the picture as given, at most 256 px)}

``values[i][k]`` is target ``targets[i]`` at layer ``layers[k]`` over every source: only computed cells
are stored (JSON has no NaN). ``.npz`` holds the same header as JSON text plus one float64 array per
method, so it round-trips bit for bit and loads fast for large maps.

Files written by attnflow 0.1 have no version: one explanation (``tokens``, ``method``, ``target``,
``scores``), a list of them (``--method all``), ``{"kind": "maps", ...}`` and
``{"kind": "generation", ...}``. ``from_dict`` converts each of them.
"""

from __future__ import annotations

import base64
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.results.block import Block
from attnflow.results.files import write_text, write_with

SCHEMA = "attnflow.attribution"
VERSION = 2
SUFFIXES = ("json", "npz")


def _plain(value: Any) -> Any:
    """numpy scalars and arrays in params/meta -> JSON values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return value


def _image_to_json(image: np.ndarray | None) -> dict | None:
    if image is None:
        return None
    # Images come from PIL as uint8 / 255, so 8 bits per channel store them exactly.
    pixels = np.clip(np.rint(np.asarray(image, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)
    return {"dtype": "uint8", "shape": list(pixels.shape), "base64": base64.b64encode(pixels.tobytes()).decode("ascii")}


def _image_from_json(data: Any) -> np.ndarray | None:
    if data is None:
        return None
    raw = np.frombuffer(base64.b64decode(data["base64"]), dtype=np.uint8).reshape(data["shape"])
    return raw.astype(np.float32) / np.float32(255.0)


def header(result: Any) -> dict[str, Any]:
    """Everything but the scores and the image."""
    return _plain({
        "schema": SCHEMA, "version": VERSION, "kind": result.kind, "model": result.model,
        "input": result.input if result.input is None or isinstance(result.input, str) else str(result.input),
        "prediction": result.prediction, "params": dict(result.params), "sources": list(result.sources),
        "input_length": result.input_length, "targets": list(result.targets),
        "target_positions": list(result.target_positions), "target": result.target, "method": result.method,
        "n_layers": result.n_layers, "grid": list(result.grid) if result.grid else None, "meta": dict(result.meta),
    })


def to_dict(result: Any) -> dict[str, Any]:
    out = header(result)
    out["scores"] = {m: {"targets": list(b.targets), "layers": list(b.layers), "values": b.values.tolist()}
                     for m, b in result.blocks.items()}
    out["image"] = _image_to_json(result.image)
    if result.original is not None:
        out["original"] = _image_to_json(result.original)
    return out


def to_json(result: Any, path: Any = None, indent: int | None = None) -> str:
    text = json.dumps(to_dict(result), indent=indent, allow_nan=False)
    if path is not None:
        write_text(path, text)
    return text


def _require(data: dict, keys: tuple[str, ...], what: str) -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise AttnflowError(f"{what} needs the keys {', '.join(keys)}; missing {missing}")


def _from_v2(cls: type, data: dict[str, Any], arrays: dict[str, Any] | None = None) -> Any:
    _require(data, ("kind", "sources", "targets", "target_positions", "n_layers", "scores"), "a version-2 result")
    blocks = {}
    for method, entry in data["scores"].items():
        values = arrays[method] if arrays is not None else np.asarray(entry["values"], dtype=float)
        targets, layers = entry["targets"], entry["layers"]
        values = np.asarray(values, dtype=float).reshape(len(targets), len(layers), len(data["sources"]))
        blocks[method] = Block(values, tuple(int(t) for t in targets), tuple(int(k) for k in layers))
    image = arrays.get("__image__") if arrays is not None else _image_from_json(data.get("image"))
    original = arrays.get("__original__") if arrays is not None else _image_from_json(data.get("original"))
    return cls(kind=data["kind"], sources=data["sources"], targets=data["targets"],
                       target_positions=data["target_positions"], blocks=blocks, n_layers=int(data["n_layers"]),
                       target=data.get("target", 0), method=data.get("method"), input=data.get("input"),
                       input_length=data.get("input_length"), prediction=data.get("prediction"),
                       model=data.get("model"), params=dict(data.get("params") or {}),
                       grid=tuple(data["grid"]) if data.get("grid") else None, image=image,
                       meta=dict(data.get("meta") or {}), original=original)


# ------------------------------------------------------------------------- attnflow 0.1 files

def _text_v1(cls: type, tokens: list, rows: dict[str, dict[int, Any]], target: int, prediction: Any,
             params: dict, order: list[str] | None = None) -> Any:
    """Rows per method and target (``(layers, n)`` each) of one text -> an Attribution."""
    n = len(tokens)
    blocks, n_layers = {}, None
    for method, per_target in rows.items():
        targets = sorted(per_target)
        values = np.stack([np.asarray(per_target[t], dtype=float) for t in targets])
        if values.ndim != 3 or values.shape[2] != n:
            raise AttnflowError(f"the {method!r} scores must be (layers, {n} tokens) per target; got {values.shape[1:]}")
        if n_layers is not None and values.shape[1] != n_layers:
            raise AttnflowError("all explanations in one result must have the same number of layers")
        n_layers = values.shape[1]
        blocks[method] = Block(values, tuple(targets), tuple(range(n_layers)))
    return cls(kind="text", sources=tokens, targets=tokens, target_positions=list(range(n)), blocks=blocks,
                       n_layers=int(n_layers), target=target, method=(order or list(rows))[0],
                       input=params.get("text"), prediction=prediction, model=params.get("model"),
                       params={k: v for k, v in params.items() if k not in ("text", "model")})


def _explanations_v1(cls: type, items: list[dict]) -> Any:
    if not items or not all(isinstance(v, dict) for v in items):
        raise AttnflowError("a list of results must hold one or more explanation objects")
    rows: dict[str, dict[int, Any]] = {}
    tokens = None
    for item in items:
        _require(item, ("tokens", "method", "target", "scores"), "an explanation")
        if tokens is not None and list(item["tokens"]) != tokens:
            raise AttnflowError("all explanations in one result must be of the same input (their tokens differ)")
        tokens = [str(t) for t in item["tokens"]]
        target = int(item["target"])
        if not 0 <= target < len(tokens):
            raise AttnflowError(f"target {target} is outside the {len(tokens)} tokens")
        rows.setdefault(str(item["method"]), {})[target] = item["scores"]
    first = items[0]
    return _text_v1(cls, tokens, rows, int(first["target"]), first.get("prediction"), dict(first.get("params") or {}),
                    order=[str(i["method"]) for i in items])


def _maps_v1(cls: type, data: dict) -> Any:
    _require(data, ("tokens", "target", "maps"), "a maps result (kind 'maps')")
    rows = {str(m): {int(t): v for t, v in per.items()} for m, per in data["maps"].items()}
    target = int(data["target"])
    if not any(target in per for per in rows.values()):
        raise AttnflowError(f"target {target} is not among the computed positions")
    order = list(rows)
    default = "rollout" if "rollout" in rows else order[0]  # what 0.1's report opened on
    return _text_v1(cls, [str(t) for t in data["tokens"]], rows, target, data.get("prediction"),
                    dict(data.get("params") or {}), order=[default])


def _generation_v1(cls: type, data: dict) -> Any:
    _require(data, ("prompt_tokens", "generated_tokens", "method", "M"), "a generation result")
    prompt, generated = [str(t) for t in data["prompt_tokens"]], [str(t) for t in data["generated_tokens"]]
    if not prompt or not generated:
        raise AttnflowError("prompt_tokens and generated_tokens must be non-empty lists of strings")
    m_arr = np.asarray(data["M"], dtype=float)
    if m_arr.ndim != 3 or m_arr.shape[:2] != (len(generated), len(prompt)):
        raise AttnflowError(f"M must have shape ({len(generated)} generated, {len(prompt)} prompt tokens, layers); "
                            f"got {m_arr.shape}")
    n_layers = m_arr.shape[2]
    if data.get("rows"):
        values = np.asarray(data["rows"], dtype=float)
        width = len(prompt) + len(generated)
        if values.shape != (len(generated), n_layers, width):
            raise AttnflowError(f"rows must have shape ({len(generated)}, {n_layers}, {width}); got {values.shape}")
        sources = prompt + generated
    else:  # M alone: the prompt columns only
        values, sources = m_arr.transpose(0, 2, 1), prompt
    meta = {k: data[k] for k in ("completion", "generated_ids") if k in data}
    return cls(kind="generation", sources=sources, targets=generated,
                       target_positions=[len(prompt) - 1 + i for i in range(len(generated))],
                       blocks={str(data["method"]): Block.full(values)}, n_layers=n_layers, input=data.get("prompt"),
                       input_length=len(prompt), model=data.get("model"), params=dict(data.get("params") or {}),
                       meta=meta)


def from_dict(data: Any, cls: type) -> Any:
    """Any result JSON value (version 2, or one of attnflow 0.1's forms) -> a ``cls``
    (``Attribution``, which passes itself: this module never imports it)."""
    try:
        if isinstance(data, list):
            return _explanations_v1(cls, data)
        if not isinstance(data, dict):
            raise AttnflowError("a result must be a JSON object (or a list of explanation objects)")
        if "schema" in data and data["schema"] != SCHEMA:
            raise AttnflowError(f"this is not an attnflow result: its schema is {data['schema']!r} "
                                f"(an attnflow result's is {SCHEMA!r})")
        if "version" in data or data.get("schema") == SCHEMA:
            version = data.get("version")
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise AttnflowError(f"the result's schema version must be a whole number (1 to {VERSION}); "
                                    f"got {version!r} ({type(version).__name__})")
            if version > VERSION:
                raise AttnflowError(f"this result has schema version {version!r}; this attnflow reads versions up to "
                                    f"{VERSION} (upgrade attnflow)")
            return _from_v2(cls, data)
        if data.get("kind") == "generation":
            return _generation_v1(cls, data)
        if data.get("kind") == "maps":
            return _maps_v1(cls, data)
        return _explanations_v1(cls, [data])
    except AttnflowError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise AttnflowError(f"this does not hold an attnflow result ({type(exc).__name__}: {exc})") from exc


def from_json(text: str, cls: type) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AttnflowError(f"not valid JSON ({exc})") from exc
    return from_dict(value, cls)


# --------------------------------------------------------------------------------------- files

def _suffix(path: Any) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in SUFFIXES:
        raise AttnflowError(f"{str(path)!r} must end in .json or .npz")
    return suffix


def save(result: Any, path: Any) -> str:
    """Write ``.json`` or ``.npz`` atomically."""
    if _suffix(path) == "json":
        to_json(result, path)
        return str(path)
    arrays = {f"scores.{m}": b.values for m, b in result.blocks.items()}
    if result.image is not None:
        arrays["image"] = np.asarray(result.image)
    if result.original is not None:
        arrays["original"] = np.asarray(result.original)
    head = header(result)
    head["scores"] = {m: {"targets": list(b.targets), "layers": list(b.layers)} for m, b in result.blocks.items()}

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a temporary name
            np.savez_compressed(f, header=np.array(json.dumps(head, allow_nan=False)), **arrays)

    return write_with(path, write)


def load(path: Any, cls: type) -> Any:
    """Read a result file: ``.npz``, or JSON of any version (any suffix but ``.npz``)."""
    p = Path(path)
    if p.is_dir():
        raise AttnflowError(f"{str(p)!r} is a folder; pass a result file (.json or .npz) — a batch output "
                            "folder is read one input at a time with `attnflow view FOLDER --id ID`")
    if not p.is_file():
        raise AttnflowError(f"no such result file: {str(p)!r}")
    try:
        if p.suffix.lower() == ".npz":
            try:
                # our own file object, closed however np.load fails (a truncated archive included)
                with open(p, "rb") as handle, np.load(handle, allow_pickle=False) as data:
                    head = json.loads(str(data["header"]))
                    arrays = {m: data[f"scores.{m}"] for m in head["scores"]}
                    for name in ("image", "original"):
                        if name in data.files:
                            arrays[f"__{name}__"] = data[name]
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
                raise AttnflowError(f"not an attnflow .npz result, or a damaged one ({exc}); "
                                    "save it again with result.save(PATH)") from exc
            return _from_v2(cls, head, arrays)
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise AttnflowError(f"not valid JSON ({exc})") from exc
        return from_json(text, cls)
    except AttnflowError as exc:
        raise AttnflowError(f"{str(p)!r}: {exc}") from exc
