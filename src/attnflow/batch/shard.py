"""One shard of a batch, computed where it runs (a Dask worker process, or the caller's process).

The model is loaded once per process and kept (``loaded``); each shard's texts go through the
model in forward passes of up to ``batch_size`` texts of similar length (right-padded: every real
token's attention is its attention alone, see ``attnflow.capture.capture``), then each text's
slice of the captured maps goes through the same code as ``attnflow.explain``
(``attnflow.api.text.attribute``). So every row equals ``explain`` on that text alone, up to the
float32 rounding of a batched forward pass (``batch_size=1`` makes them identical).

A row that cannot be explained (not a string, empty, too long without ``truncate``, no CLS token, an
unreadable image, ...) becomes an error record with the reason; the other rows go on.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnflow.config.settings import Settings
from attnflow.errors import AttnflowError


@dataclass(frozen=True)
class BatchJob:
    """What every shard of a batch is computed with: the model, the methods, the real
    ``attnflow.Settings`` each row is explained with (``settings``: one record of every
    setting and its default, not a copy), and how the shards run and are written."""

    model: str | None  # a path or hub id; None = the default model of the worker's attnflow
    methods: tuple[str, ...]
    settings: Settings
    images: bool = False
    maps: bool = False
    batch_size: int = 32
    device: str = "auto"
    id_type: str = "int64"
    label_type: str = "null"
    header: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass
class ShardTask:
    name: str
    rows: tuple[int, ...]
    ids: list
    values: list
    labels: list
    base: str | None = None  # folder for relative image paths


@dataclass
class ShardOutput:
    name: str
    rows: Any  # pyarrow.Table of the row schema
    maps: Any  # pyarrow.Table of the map schema, or None
    errors: list[dict]
    seconds: float
    where: str


# ------------------------------------------------------------------------ the per-process model

_MODELS: dict = {}
_LOCK = threading.Lock()


def _threads_for_worker() -> None:
    """In a Dask worker, use as many torch and numba threads as the worker has task threads (shards of
    one process run one at a time, see ``run_shard``): a LocalCluster of one single-threaded worker
    per core then uses each core once instead of every process spinning a thread per core."""
    try:
        from distributed import get_worker

        threads = get_worker().state.nthreads
    except (ImportError, ValueError, AttributeError):
        return
    import numba
    import torch

    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def loaded(job: BatchJob) -> tuple[Any, Any]:
    """``(model, tokenizer)`` (tokenizer None for images), loaded on first use in this process."""
    key = (job.model, job.images, job.device)
    if key not in _MODELS:
        from attnflow.api.devices import pick_device
        from attnflow.hf.load import load_model, quiet_transformers

        quiet_transformers()
        _threads_for_worker()
        if job.images:
            from attnflow.capture.vision import load_vision_model

            model, tokenizer = load_vision_model(job.model), None
        else:
            model, tokenizer = load_model(job.model)
        _MODELS[key] = (model.to(pick_device(job.device, host=True)), tokenizer)  # this worker's own GPUs
    return _MODELS[key]


# ---------------------------------------------------------------------------------- one shard

def run_shard(task: ShardTask, job: BatchJob, model: Any = None, tokenizer: Any = None) -> ShardOutput:
    """Explain every row of ``task``; ``model``/``tokenizer`` default to this process's cached copy.
    Shards of one process run one at a time (torch and numba already use the process's threads)."""
    start = time.perf_counter()
    with _LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation notices: the row's tokens show what was kept
        if model is None:
            model, tokenizer = loaded(job)
        rows, maps, errors = (_image_rows if job.images else _text_rows)(task, job, model, tokenizer)
    return ShardOutput(task.name, _table(rows, job, maps=False),
                       _table(maps, job, maps=True) if job.maps else None, errors,
                       time.perf_counter() - start, f"{socket.gethostname()}:{os.getpid()}")


def _table(records: list[dict], job: BatchJob, maps: bool) -> Any:
    import pyarrow as pa

    from attnflow.results.rows import map_schema, row_schema

    schema = (map_schema(job.id_type, job.header) if maps
              else row_schema(job.id_type, job.label_type, job.header))
    return pa.Table.from_pylist(records, schema=schema)


def _error(task: ShardTask, k: int, reason: str) -> dict:
    value = task.values[k]
    shown = value if isinstance(value, str) else repr(value)
    return {"row": task.rows[k], "id": task.ids[k], "text": shown[:500], "error": reason}


def text_problem(value: Any) -> str | None:
    """Why ``value`` cannot be explained as a text, or None."""
    if value is None:
        return "no text (the value is missing)"
    if isinstance(value, bytes):
        return f"undecodable bytes: the text is not valid UTF-8 ({value[:60]!r})"
    if not isinstance(value, str):
        return f"the text must be a string; got {type(value).__name__} {value!r}"[:300]
    if not value.strip():
        return "empty text"
    return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text if isinstance(exc, AttnflowError) else f"{type(exc).__name__}: {text}"


def _collect(task: ShardTask, job: BatchJob, k: int, result: Any, rows: list, maps: list) -> None:
    from attnflow.results.rows import to_map_rows, to_rows

    rows.extend(to_rows(result, row=task.rows[k], id=task.ids[k], label=task.labels[k]))
    if job.maps:
        maps.extend(to_map_rows(result, row=task.rows[k], id=task.ids[k]))


def _text_rows(task: ShardTask, job: BatchJob, model: Any, tokenizer: Any) -> tuple[list, list, list]:
    from attnflow.capture.text import max_length

    rows: list[dict] = []
    maps: list[dict] = []
    errors: list[dict] = []
    good = []
    for k, value in enumerate(task.values):
        problem = text_problem(value)
        if problem:
            errors.append(_error(task, k, problem))
        else:
            good.append(k)
    lengths = {}
    if good:
        ids = tokenizer([task.values[k] for k in good], add_special_tokens=True)["input_ids"]
        lengths = {k: len(seq) for k, seq in zip(good, ids)}
    limit = max_length(model, tokenizer)
    if limit is not None and not job.settings.truncate:
        for k in [k for k in good if lengths[k] > limit]:
            errors.append(_error(task, k, f"the text is {lengths[k]} tokens long but the model takes at most "
                                          f"{limit}; shorten it or pass --truncate (truncate=True)"))
        good = [k for k in good if lengths[k] <= limit]
    good.sort(key=lambda k: (lengths[k], k))
    for start in range(0, len(good), job.batch_size):
        chunk = good[start:start + job.batch_size]
        for k, outcome in zip(chunk, explain_texts([task.values[k] for k in chunk], job, model, tokenizer)):
            if isinstance(outcome, BaseException):
                errors.append(_error(task, k, _reason(outcome)))
            else:
                _collect(task, job, k, outcome, rows, maps)
    return rows, maps, errors


def explain_texts(texts: list[str], job: BatchJob, model: Any, tokenizer: Any) -> list[Any]:
    """One forward pass over ``texts``, then each text's slice through ``explain``'s methods. Returns,
    per text, its Attribution or the exception it raised (the others are unaffected)."""
    from attnflow.api.text import attribute, captured_input
    from attnflow.capture.text import capture

    try:
        batch = capture(model, tokenizer, texts, truncate=job.settings.truncate, weighting=job.settings.weighting,
                        head_fusion=None if job.settings.weighting == "attention" else job.settings.head_fusion)
    except Exception as exc:  # noqa: BLE001  one bad text must not fail its neighbours: capture each alone
        if len(texts) == 1:
            return [exc]
        return [outcome for text in texts for outcome in explain_texts([text], job, model, tokenizer)]
    out: list[Any] = []
    for b, text in enumerate(texts):
        try:
            run = captured_input(one_of(batch, b), text, model, tokenizer, target=job.settings.target)
            out.append(attribute(run, job.settings, methods=list(job.methods),
                                 shown=job.methods[0], targets="all" if job.maps else "target",
                                 flow_targets="all" if job.maps else "target", progress=None))
        except Exception as exc:  # noqa: BLE001  recorded as this row's error
            out.append(exc)
    return out


def one_of(batch: Any, b: int) -> Any:
    """Text ``b`` of a right-padded batch of maps, as if it had been captured alone: its real tokens are
    the first ``n`` positions, and no real token attends to padding."""
    from attnflow.core.maps import AttentionMaps

    n = int(batch.mask[b].sum())
    logits = batch.logits[b] if batch.logits is not None else None
    if logits is not None and logits.dim() == 2:  # per-token outputs (language-model heads)
        logits = logits[:n]
    return AttentionMaps(attentions=batch.attentions[b, :, :, :n, :n], tokens=list(batch.tokens[b][:n]), mask=None,
                         causal=batch.causal, special=list(batch.special[b]),
                         input_ids=batch.input_ids[b, :n] if batch.input_ids is not None else None, logits=logits,
                         head_fusion=batch.head_fusion, weighting=batch.weighting)


def _image_rows(task: ShardTask, job: BatchJob, model: Any, _tokenizer: Any) -> tuple[list, list, list]:
    from dataclasses import replace

    from attnflow.api.images import explain_image
    from attnflow.capture.vision import open_image

    rows: list[dict] = []
    errors: list[dict] = []
    opened = []  # (k, path, image)
    for k, value in enumerate(task.values):
        problem = text_problem(value)
        if problem:
            errors.append(_error(task, k, problem.replace("text", "image path")))
            continue
        path = Path(value).expanduser()
        if not path.is_absolute() and task.base is not None:
            path = Path(task.base) / path
        try:
            opened.append((k, str(path), open_image(path)))
        except AttnflowError as exc:
            errors.append(_error(task, k, str(exc)))
    for start in range(0, len(opened), job.batch_size):
        chunk = opened[start:start + job.batch_size]
        try:
            results = explain_image([image for _, _, image in chunk], model, method=list(job.methods),
                                    settings=job.settings)
        except Exception:  # noqa: BLE001  find the image that fails, keep the others
            results = []
            for _, _, image in chunk:
                try:
                    results.append(explain_image([image], model, method=list(job.methods),
                                                 settings=job.settings)[0])
                except Exception as exc:  # noqa: BLE001
                    results.append(exc)
        for (k, path, _), result in zip(chunk, results):
            if isinstance(result, BaseException):
                errors.append(_error(task, k, _reason(result)))
            else:
                _collect(task, job, k, replace(result, input=path), rows, [])
    return rows, [], errors
