"""Reading a batch's input: a JSONL, CSV or Parquet file, or from Python a list of texts (or records), a
pandas / polars DataFrame, a pyarrow Table or a Hugging Face ``datasets.Dataset``.

Everything that makes the whole input unusable is refused here, before any work, with one sentence: a
missing file, an unknown format, a file that does not parse (with its line), a missing column,
missing or repeated ids. What is wrong with one row only (empty text, undecodable bytes, a value that
is not a string) is kept as it stands and becomes that row's error when the row is processed, so the
rest of the run goes on.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnflow.errors import AttnflowError
from attnflow.results.rows import pyarrow

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


@dataclass
class Inputs:
    """The rows of a batch, in input order: ``values[i]`` is the text (or image path) of row ``i``, or
    whatever stood in its place (bytes that are not UTF-8, None, a number) for the row to fail on."""

    ids: list
    values: list
    labels: list
    id_type: str  # "int64" or "string"
    label_type: str  # an Arrow type name ("null" when there are no labels)
    source: str  # what was read, for messages and the manifest
    base: str | None = None  # the folder relative image paths are resolved against

    def __len__(self) -> int:
        return len(self.values)


def read_inputs(data: Any, *, column: str | None = None, id_column: str | None = None,
                label_column: str | None = None, images: bool = False) -> Inputs:
    """``column`` holds the texts (default "text") or, with ``images``, the image paths (default
    "image"); ``id_column`` (default "id") and ``label_column`` (default "label") are used when present
    and must exist when named."""
    default = "image" if images else "text"
    if isinstance(data, (str, Path)):
        path = Path(data)
        records, columns, source = _read_file(path, column or default)
        base = str(path.resolve().parent)
        shown = repr(source)
    else:
        records, columns, source = _from_python(data, column or default)
        base, shown = None, source
    if not records:
        raise AttnflowError(f"{shown} holds no rows")
    named = column or default
    if named not in columns:
        names = ", ".join(map(repr, columns)) or "none"
        raise AttnflowError(f"{shown} has no column {named!r} (its columns: {names}); name the column that holds "
                            "the inputs with --text-column (text_column= in Python)")
    for what, name in (("id", id_column), ("label", label_column)):
        if name is not None and name not in columns:
            raise AttnflowError(f"{shown} has no {what} column {name!r} (its columns: {', '.join(map(repr, columns))})")
    id_name = id_column or ("id" if "id" in columns else None)
    label_name = label_column or ("label" if "label" in columns else None)
    values = [_text_value(r.get(named)) for r in records]
    ids, id_type = _ids(records, id_name, shown)
    labels, label_type = _labels(records, label_name)
    return Inputs(ids=ids, values=values, labels=labels, id_type=id_type, label_type=label_type, source=source,
                  base=base)


# ------------------------------------------------------------------------------------ files

def _read_file(path: Path, column: str) -> tuple[list[dict], list[str], str]:
    source = str(path)
    if not path.is_file():
        hint = "" if path.suffix.lower() in FORMATS else " (from Python, pass texts as a list)"
        raise AttnflowError(f"no such input file: {source!r}{hint}")
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise AttnflowError(f"{source!r}: the input must be a .jsonl, .csv or .parquet file")
    if kind == "jsonl":
        return (*_read_jsonl(path), source)
    return (*_read_arrow(path, kind, column), source)


def _read_jsonl(path: Path) -> tuple[list[dict], list[str]]:
    records, columns = [], {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            # Bytes that are not UTF-8 stay as lone surrogates, so that a bad text fails its row
            # only; the JSON structure itself must parse.
            text = line.decode("utf-8", errors="surrogateescape").strip()
            if not text:
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise AttnflowError(f"{str(path)!r} line {number} is not valid JSON ({exc.msg}, column "
                                    f"{exc.colno}); each line must be one JSON object") from exc
            if not isinstance(value, dict):
                raise AttnflowError(f"{str(path)!r} line {number} is a JSON {type(value).__name__}, not an object; "
                                    "each line must be one JSON object")
            records.append(value)
            columns.update(dict.fromkeys(value))
    return records, list(columns)


def _read_arrow(path: Path, kind: str, column: str) -> tuple[list[dict], list[str]]:
    pa = pyarrow()
    try:
        if kind == "csv":
            import pyarrow.csv as pcsv

            # The text column is read as bytes so that one undecodable text fails its row, not the file.
            table = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(column_types={column: pa.binary()}))
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AttnflowError(f"{str(path)!r} is not a readable {kind.upper() if kind == 'csv' else 'Parquet'} "
                            f"file: {reason}") from exc
    return table.to_pylist(), list(table.column_names)


# ----------------------------------------------------------------------------------- Python

def _from_python(data: Any, column: str) -> tuple[list[dict], list[str], str]:
    columns = _column_names(data)
    if columns is not None:  # a table: pandas, polars, pyarrow, datasets.Dataset
        name = type(data).__name__
        n = _length(data)
        table = {c: _column(data, c) for c in columns}
        return [{c: table[c][i] for c in columns} for i in range(n)], columns, f"the {name}"
    if isinstance(data, (bytes, dict)):
        raise AttnflowError(f"batch takes a file path, a table or an iterable of texts; got {type(data).__name__}")
    try:
        items = list(data)
    except TypeError as exc:
        raise AttnflowError(f"batch takes a file path, a table or an iterable of texts; "
                            f"got {type(data).__name__}") from exc
    if items and all(isinstance(v, dict) for v in items):
        columns = list(dict.fromkeys(k for v in items for k in v))
        return items, columns, f"the list of {len(items)} records"
    return [{column: v} for v in items], [column], f"the list of {len(items)} texts"


def _column_names(data: Any) -> list[str] | None:
    for attribute in ("column_names", "columns"):  # datasets / pyarrow, then pandas / polars
        names = getattr(data, attribute, None)
        if names is not None and not callable(names) and not isinstance(data, (list, tuple)):
            return [str(c) for c in names]
    return None


def _length(data: Any) -> int:
    shape = getattr(data, "shape", None)
    return int(shape[0]) if shape is not None else len(data)


def _column(data: Any, name: str) -> list:
    column = data[name]  # a pandas / polars Series, a pyarrow ChunkedArray, a datasets Column or list
    for method in ("tolist", "to_list", "to_pylist"):
        if hasattr(column, method):
            return list(getattr(column, method)())
    return list(column)


# ----------------------------------------------------------------------------------- values

def _plain(value: Any) -> Any:
    """numpy scalars -> Python; pandas' missing markers (NaN, NA, NaT) -> None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    return value


def _text_value(value: Any) -> Any:
    value = _plain(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 in the file
            return value.encode("utf-8", errors="surrogateescape")
    return value


def _ids(records: list[dict], name: str | None, source: str) -> tuple[list, str]:
    if name is None:
        return list(range(len(records))), "int64"
    ids = [_plain(r.get(name)) for r in records]
    for i, v in enumerate(ids):
        if v is None:
            raise AttnflowError(f"{source}: row {i} has no {name!r} (every row needs an id when there is an id column)")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in ids):
        id_type = "int64"
    else:
        id_type, ids = "string", [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in ids]
    seen: dict = {}
    for i, v in enumerate(ids):
        if v in seen:
            raise AttnflowError(f"{source}: ids must be unique; {v!r} is the id of rows {seen[v]} and {i}")
        seen[v] = i
    return ids, id_type


def _labels(records: list[dict], name: str | None) -> tuple[list, str]:
    if name is None:
        return [None] * len(records), "null"
    labels = [_plain(r.get(name)) for r in records]
    present = [v for v in labels if v is not None]
    kinds = {bool if isinstance(v, bool) else int if isinstance(v, int) else float if isinstance(v, float)
             else str for v in present}
    if not kinds:
        return labels, "null"
    if kinds == {bool}:
        return labels, "bool"
    if kinds == {int}:
        return labels, "int64"
    if kinds <= {int, float}:
        return [None if v is None else float(v) for v in labels], "float64"
    return [None if v is None else v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
            for v in labels], "string"
