"""A batch run as rows: the Parquet schema of ``attnflow batch`` (version 1) and the way back to an
``Attribution``.

A batch folder holds one row per input and method (see docs/batch.md for the whole layout)::

    OUT/batch.json                 the run: schema, settings, shard plan, last summary
    OUT/rows/part-NNNNN.parquet    the rows (a Parquet dataset: pandas, polars, DuckDB, pyarrow read it)
    OUT/maps/part-NNNNN.parquet    every target's scores, only when asked (``--maps``)
    OUT/errors.jsonl               the rows that failed, with the reason

Row columns (``ROW_COLUMNS``): ``row`` (0-based position in the input), ``id``, ``text`` (the text, or
the image's path), ``label``, ``kind``, ``method``, ``target`` (the explained position, an index into
``tokens`` for text), ``target_token``, ``prediction``, ``n_layers``, ``tokens`` (the sources),
``scores`` (``[layer][source]``: the target's row at every layer, the Attribution's
``row(method, target)``) and ``meta`` (JSON: special-token positions and ``causal`` for text; ``grid``
and ``target_position`` for images). ``id`` is int64 when every input id is an integer, else string;
``label`` keeps the input's type. Map rows: ``row``, ``id``, ``method``, ``targets``, ``layers`` and
``scores`` (``[target][layer][source]``, an Attribution ``Block``).

Every Parquet file carries the run's header in its key-value metadata under ``attnflow`` (schema,
version, model, methods, params), so one file is enough to rebuild its results. pyarrow is needed only
to read or write the files (``pip install attnflow[scale]``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.results.attribution import Attribution
from attnflow.results.block import Block

SCHEMA = "attnflow.batch"
VERSION = 1
MANIFEST, ROWS, MAPS, ERRORS = "batch.json", "rows", "maps", "errors.jsonl"
ROW_COLUMNS = ("row", "id", "text", "label", "kind", "method", "target", "target_token", "prediction", "n_layers",
               "tokens", "scores", "meta")
METADATA_KEY = b"attnflow"


def pyarrow() -> Any:
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise AttnflowError("batch runs are Parquet files and need pyarrow: pip install 'attnflow[scale]'") from exc
    return pa


def row_schema(id_type: str = "int64", label_type: str = "null", header: dict | None = None) -> Any:
    """The Arrow schema of the rows; ``id_type`` "int64" or "string", ``label_type`` an Arrow type name."""
    pa = pyarrow()
    fields = [
        ("row", pa.int64()), ("id", _type(id_type)), ("text", pa.string()), ("label", _type(label_type)),
        ("kind", pa.string()), ("method", pa.string()), ("target", pa.int32()), ("target_token", pa.string()),
        ("prediction", pa.string()), ("n_layers", pa.int32()), ("tokens", pa.list_(pa.string())),
        ("scores", pa.list_(pa.list_(pa.float64()))), ("meta", pa.string()),
    ]
    return _with_header(pa.schema(fields), header)


def map_schema(id_type: str = "int64", header: dict | None = None) -> Any:
    pa = pyarrow()
    fields = [("row", pa.int64()), ("id", _type(id_type)), ("method", pa.string()),
              ("targets", pa.list_(pa.int32())), ("layers", pa.list_(pa.int32())),
              ("scores", pa.list_(pa.list_(pa.list_(pa.float64()))))]
    return _with_header(pa.schema(fields), header)


def _type(name: str) -> Any:
    pa = pyarrow()
    types = {"int64": pa.int64(), "string": pa.string(), "float64": pa.float64(), "double": pa.float64(),
             "bool": pa.bool_(), "null": pa.null()}
    if name not in types:
        raise AttnflowError(f"no column type {name!r} in the batch schema; expected one of {', '.join(types)}")
    return types[name]


def _with_header(schema: Any, header: dict | None) -> Any:
    if header is None:
        return schema
    return schema.with_metadata({METADATA_KEY: json.dumps(header, allow_nan=False).encode("utf-8")})


def header_of(schema: Any) -> dict:
    """The run's header from a Parquet file's (or dataset's) Arrow schema."""
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise AttnflowError("this Parquet file was not written by attnflow batch (no 'attnflow' metadata)")
    head = json.loads(raw)
    if head.get("schema") != SCHEMA or not isinstance(head.get("version"), int) or head["version"] > VERSION:
        raise AttnflowError(f"batch schema version {head.get('version')!r}; this attnflow reads versions up to "
                            f"{VERSION} (upgrade attnflow)")
    return head


# ---------------------------------------------------------------------------------- to rows

def _meta(result: Attribution) -> dict:
    meta = dict(result.meta)
    if result.kind == "image":
        meta["grid"] = list(result.grid)
        meta["target_position"] = result.target_positions[result.target]
    return meta


def to_rows(result: Attribution, *, row: int, id: Any, label: Any = None) -> list[dict]:
    """One row per method: the default target's scores at every layer (``result.row(method)``)."""
    meta = json.dumps(_meta(result), allow_nan=False)
    base = {"row": int(row), "id": id, "text": result.input if isinstance(result.input, str) else str(result.input),
            "label": label, "kind": result.kind, "target": result.target, "target_token": result.targets[result.target],
            "prediction": result.prediction, "n_layers": result.n_layers, "tokens": list(result.sources), "meta": meta}
    return [{**base, "method": method, "scores": result.row(method).tolist()} for method in result.methods]


def to_map_rows(result: Attribution, *, row: int, id: Any) -> list[dict]:
    """One row per method with every computed target (the Attribution's blocks)."""
    return [{"row": int(row), "id": id, "method": method, "targets": list(block.targets),
             "layers": list(block.layers), "scores": block.values.tolist()} for method, block in result.blocks.items()]


# -------------------------------------------------------------------------------- from rows

def from_rows(rows: Sequence[dict], header: dict, maps: Sequence[dict] = ()) -> Attribution:
    """The rows of one input (one per method, all with the same ``row``) -> its Attribution; map rows,
    when given, replace a method's single target by every computed target."""
    if not rows:
        raise AttnflowError("no rows to build a result from")
    first = rows[0]
    if any(r["row"] != first["row"] for r in rows):
        raise AttnflowError("rows of different inputs cannot make one result")
    meta = json.loads(first["meta"] or "{}")
    tokens, target, kind = list(first["tokens"]), int(first["target"]), first["kind"]
    full = {m["method"]: m for m in maps}
    blocks = {}
    order = [m for m in header.get("methods", []) if any(r["method"] == m for r in rows)]
    order += [r["method"] for r in rows if r["method"] not in order]
    by_method = {r["method"]: r for r in rows}
    for method in order:
        if method in full:
            entry = full[method]
            blocks[method] = Block(np.asarray(entry["scores"], dtype=float).reshape(
                len(entry["targets"]), len(entry["layers"]), len(tokens)), tuple(entry["targets"]),
                tuple(entry["layers"]))
        else:
            blocks[method] = Block.rows(np.asarray(by_method[method]["scores"], dtype=float)[None],
                                        [0 if kind == "image" else target])
    if kind == "image":
        grid = meta.pop("grid", None)
        position = meta.pop("target_position", None)
        targets, positions, target, grid = [first["target_token"]], [position], 0, grid
    else:
        targets, positions, grid = tokens, list(range(len(tokens))), None
    return Attribution(kind=kind, sources=tokens, targets=targets, target_positions=positions, blocks=blocks,
                       n_layers=int(first["n_layers"]), target=target, method=order[0], input=first["text"],
                       prediction=first["prediction"], model=header.get("model"),
                       params=dict(header.get("params") or {}),
                       grid=tuple(grid) if grid else None, meta={**meta, "id": first["id"], "row": first["row"],
                                                                 "label": first["label"]})


# ------------------------------------------------------------------------------ batch folders

def is_batch_folder(path: Any) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def _dataset(folder: Path, sub: str) -> Any:
    import pyarrow.dataset as ds

    pyarrow()
    files = sorted((folder / sub).glob("part-*.parquet"))
    return ds.dataset([str(f) for f in files], format="parquet") if files else None


def read_result(folder: Any, id: Any) -> Attribution:
    """The result of the input with this ``id`` in a batch folder (every method; every target where the
    run kept full maps). ``id`` may be given as text for integer ids."""
    import pyarrow.dataset as ds

    folder = Path(folder)
    if not is_batch_folder(folder):
        raise AttnflowError(f"{str(folder)!r} is not an attnflow batch folder (it has no {MANIFEST})")
    rows = _dataset(folder, ROWS)
    if rows is None:
        raise AttnflowError(f"{str(folder)!r} holds no finished rows yet")
    key = _id_value(id, rows.schema.field("id").type)
    found = rows.to_table(filter=ds.field("id") == key).to_pylist()
    if not found:
        sample = list(dict.fromkeys(rows.head(50, columns=["id"]).column("id").to_pylist()))[:5]  # a row per method
        raise AttnflowError(f"no row with id {id!r} in {str(folder)!r} (ids look like {', '.join(map(repr, sample))}; "
                            f"failed rows are listed in {ERRORS})")
    maps = _dataset(folder, MAPS)
    map_rows = maps.to_table(filter=ds.field("id") == key).to_pylist() if maps is not None else []
    return from_rows(found, header_of(rows.schema), map_rows)


def _id_value(id: Any, arrow_type: Any) -> Any:
    pa = pyarrow()
    if pa.types.is_integer(arrow_type):
        text = str(id).strip()
        if not text.lstrip("-").isdigit():
            raise AttnflowError(f"this run's ids are integers; got {id!r}")
        return int(text)
    return str(id)
