"""batch(): explain a whole data set, one Parquet row per input and method, on Dask or in this process.

    run = attnflow.batch("data.jsonl", methods="rollout,flow", target="cls", out="out/run")
    run.table().to_pandas()          # every row; run.result(id) -> the Attribution of one input

Each row is an ``Attribution`` flattened (schema: ``attnflow.results.rows``,
docs/batch.md) and equals ``attnflow.explain`` on that text alone. The run is cut into shards
(``attnflow.batch.plan``), computed where the engine says
(``attnflow.batch.engine``), and written one file per shard
(``attnflow.batch.store``): a rerun with the same ``out`` finishes an interrupted run and
never writes a row twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnflow.batch.engine import run_auto, run_dask, run_local
from attnflow.batch.inputs import Inputs, read_inputs
from attnflow.batch.plan import fingerprint, plan, token_lengths
from attnflow.batch.shard import BatchJob, ShardOutput, ShardTask
from attnflow.batch.store import SHARD_KEY, Store
from attnflow.api.checks import check_methods, check_text_model
from attnflow.api.devices import check_device
from attnflow.api.scheduler import check_scheduler
from attnflow.hf.load import named_info
from attnflow.config.settings import UNSET
from attnflow.config.settings import Settings as Explanation
from attnflow.errors import AttnflowError
from attnflow.results.rows import ERRORS, ROWS, SCHEMA, VERSION, pyarrow, read_result

ENGINES = ("auto", "dask", "local")
DEVICES = ("auto", "cpu", "cuda")

Progress = Callable[[int, int], None]


@dataclass
class BatchRun:
    """What a batch run did, and its output folder ``out``."""

    out: Path
    rows: int  # inputs in the data set
    explained: int  # inputs with rows in ``out`` (this run and earlier ones)
    failed: int  # inputs in errors.jsonl
    shards: int
    written: int  # shards this run wrote
    skipped: int  # shards an earlier run had finished
    seconds: float
    engine: str
    rows_this_run: int = 0  # inputs this run processed (explained or failed)

    @property
    def rows_per_second(self) -> float:
        return self.rows_this_run / self.seconds if self.seconds > 0 else 0.0

    def table(self) -> Any:
        """Every row as a ``pyarrow.Table``, in input order (``row``, then method)."""
        import pyarrow.dataset as ds

        files = sorted(str(p) for p in (self.out / ROWS).glob("part-*.parquet"))
        if not files:
            return None
        table = ds.dataset(files, format="parquet").to_table().sort_by([("row", "ascending"), ("method", "ascending")])
        metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != SHARD_KEY}  # one shard's errors
        return table.replace_schema_metadata(metadata)

    def errors(self) -> list[dict]:
        import json

        path = self.out / ERRORS
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []

    def result(self, id: Any) -> Any:
        """The ``Attribution`` of the input with this id."""
        return read_result(self.out, id)

    def summary(self) -> str:
        earlier = f" ({self.skipped} finished by an earlier run)" if self.skipped else ""
        shards = f"{self.shards} shard{'s' * (self.shards != 1)}"
        head = (f"rows: {self.explained} of {self.rows} explained, {self.failed} failed; {shards}, "
                f"{self.written} written now{earlier}")
        if not self.rows_this_run:
            return head + "\nnothing to do: every shard was written by an earlier run"
        return (f"{head}\nthroughput: {self.rows_per_second:.1f} rows/s ({self.rows_this_run} rows in "
                f"{self.seconds:.1f} s, start-up included; engine: {self.engine})")


def check(options: dict, images: bool) -> None:
    """Every refusal that needs neither torch nor the data (no model loads; well under a second): the
    settings, the model folder against them (``attnflow.api.checks``, the functions
    ``attnflow.explain`` calls), the device, the scheduler, the engine and the shard sizes."""
    if options["engine"] not in ENGINES:
        raise AttnflowError(f"engine (--engine) must be one of {', '.join(ENGINES)}; got {options['engine']!r}")
    for name in ("shard_size", "batch_size"):
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise AttnflowError(f"{name} (--{name.replace('_', '-')}) must be a positive integer; got {value!r}")
    workers = options["workers"]
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise AttnflowError(f"workers (--workers) must be a positive integer; got {workers!r}")
    if options["engine"] == "local" and (options["scheduler"] is not None or workers is not None):
        raise AttnflowError("the local engine runs in this process: drop scheduler/workers (--scheduler, "
                            "--workers) or use engine 'dask'")
    target = options["target"]  # checked with the other settings (attnflow.config.Settings.check)
    if images and options["maps"]:
        raise AttnflowError("full maps are for text (drop --maps): an image result has one target, the read-out")
    if images and target is not None:
        raise AttnflowError("images explain the classifier's read-out; drop target (--target)")
    if options["scheduler"] is None:  # a cluster's workers have their own devices
        check_device(options["device"])
    elif str(options["device"]) not in DEVICES and not str(options["device"]).startswith("cuda:"):
        raise AttnflowError(f"device (--device) must be one of {', '.join(DEVICES)} or cuda:N; "
                            f"got {options['device']!r}")
    check_scheduler(options["scheduler"])
    model = options["model"]
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__") or model is None:
        from attnflow.hf.load import check_model_path, resolve_model

        if images:
            if model is not None:
                check_model_path(str(model))
                from attnflow.hf.architectures import refuse_unsupported_path

                refuse_unsupported_path(str(model))
        else:
            check_text_model(resolve_model(model), weighting=options["weighting"],
                             causal_norm=options["causal_norm"], what="batch")


def _methods(methods: Any, images: bool) -> list[str]:
    """The methods' names, from the method registry (no torch needed)."""
    from attnflow.config import registry

    if isinstance(methods, str) and ("," in methods or not methods.strip()):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
        if not methods:
            raise AttnflowError(f"methods (--methods) names no method; give one or more of "
                                f"{', '.join(registry.names('image' if images else 'text'))}, comma-separated "
                                "(e.g. rollout,flow)")
    names, _ = registry.resolve(methods, "image" if images else "text")
    return names


@Explanation.keywords
def batch(data: Any, model: Any = None, *, out: Any, tokenizer: Any = None, methods: Any = "rollout",
          target: Any = UNSET, text_column: str | None = None, id_column: str | None = None,
          label_column: str | None = None, images: bool = False, maps: bool = False, truncate: bool = UNSET,
          residual: float = UNSET, head_fusion: str = UNSET, solver: str = UNSET, causal_norm: str | None = UNSET,
          weighting: str = UNSET, settings: Explanation | None = None, engine: str = "auto", scheduler: Any = None, workers: int | None = None, shard_size: int = 64,
          batch_size: int = 32, device: str = "auto", progress: Progress | None = None) -> BatchRun:
    """Explain every row of ``data`` and write the rows to the folder ``out`` (see docs/batch.md).

    data: a .jsonl / .csv / .parquet file with a ``text`` column (``text_column`` picks another; ``id``
        and ``label`` are kept when present), or a list of texts or records, a pandas or polars
        DataFrame, a pyarrow Table or a ``datasets.Dataset``. With ``images=True`` the column (default
        "image") holds image paths, relative to the input file's folder, explained by ``explain_image``.
    model: a path or hub id (None: the default model; the bundled digits ViT for images). A loaded
        model (with ``tokenizer``) works with the local engine only: Dask workers load their own.
    methods: "rollout", "flow", "raw", "grad-rollout", "all", "rollout,flow" or a list.
    target: as in ``attnflow.explain`` ("cls", "last", a position; None: each model's default).
    weighting: "attention" or "norm", as in ``attnflow.explain`` (not with grad-rollout).
    settings: an ``attnflow.Settings``; the setting keywords (target, residual, head_fusion,
        solver, causal_norm, truncate, weighting) override it. The rows' header records
        ``settings.as_dict()`` as ``params``.
    maps: also keep every target's scores (``out/maps/``; flow then costs one max-flow per target).
    engine: "auto" (with ``scheduler``: that Dask cluster; else this process while that is quicker than
        starting a LocalCluster, which then takes over, see ``attnflow.batch.engine.run_auto``),
        "dask" (a LocalCluster of ``workers`` processes, default one per core, or ``scheduler``) or
        "local" (this process, no Dask). scheduler: ``tcp://HOST:PORT``, a scheduler file, or a
        ``distributed.Client``.
    shard_size: rows per shard (the unit of work, of writing and of what an interruption can lose);
        batch_size: texts per forward pass. device: "auto" (a GPU where the worker has one), "cpu", "cuda".
    progress: ``progress(rows_done, rows_total)`` after each shard.

    Rows that fail go to ``out/errors.jsonl`` with the reason; the input is checked whole first (a
    malformed file or a missing column raises ``AttnflowError`` before any work).
    """
    started = time.perf_counter()
    explained = Explanation.build(settings, target=target, residual=residual, head_fusion=head_fusion, solver=solver,
                                  causal_norm=causal_norm, truncate=truncate, weighting=weighting)
    target, residual, head_fusion, solver = explained.target, explained.residual, explained.head_fusion, explained.solver
    causal_norm, truncate, weighting = explained.causal_norm, explained.truncate, explained.weighting
    options = dict(methods=methods, head_fusion=head_fusion, engine=engine, device=device, shard_size=shard_size,
                   batch_size=batch_size, workers=workers, scheduler=scheduler, target=target, maps=maps,
                   residual=residual, weighting=weighting, causal_norm=causal_norm, model=model)
    check(options, images)  # nothing is created under ``out`` before every check has passed
    names = _methods(methods, images)
    check_methods(names, explained, None if images else named_info(model), what="batch")  # before anything is written
    pyarrow()
    from attnflow.api.models import is_name

    loaded_model = not is_name(model)
    if loaded_model and engine == "dask" or loaded_model and scheduler is not None:
        raise AttnflowError("pass the model as a path or hub id for the Dask engine (each worker loads it once); "
                            "a loaded model works with engine='local'")
    if loaded_model and not images and tokenizer is None:
        raise AttnflowError("pass the tokenizer together with a loaded model")
    inputs = read_inputs(data, column=text_column, id_column=id_column, label_column=label_column, images=images)
    model_name = None if model is None or loaded_model else str(model)
    if images and model_name is not None:  # text models are checked by loading their tokenizer below
        from attnflow.hf.load import check_model_path

        check_model_path(model_name)
    lengths = [0] * len(inputs) if images else token_lengths(inputs.values, tokenizer if loaded_model
                                                             else _tokenizer(model_name))
    shards = plan(lengths, shard_size)
    target_value = target
    recorded = {"model": model_name if not loaded_model else str(getattr(model, "name_or_path", "") or
                                                                  type(model).__name__),
                "methods": names, "target": target_value, "images": images, "maps": maps, "residual": residual,
                "head_fusion": head_fusion, "solver": solver, "causal_norm": causal_norm, "truncate": truncate,
                **({"weighting": weighting} if weighting != "attention" else {}), "id_type": inputs.id_type, "label_type": inputs.label_type}
    shown_model = recorded["model"] if loaded_model else _model_label(model_name, images)
    header = {"schema": SCHEMA, "version": VERSION, "model": shown_model, "methods": names,
              "params": explained.as_dict()}
    job = BatchJob(model=model_name, methods=tuple(names), settings=explained, images=images, maps=maps,
                   batch_size=batch_size, device=device, id_type=inputs.id_type, label_type=inputs.label_type,
                   header=header)
    plan_record = [{"name": s.name, "rows": len(s.rows), "hash": fingerprint(inputs, s)} for s in shards]
    store = Store.open(out, recorded, inputs.source, len(inputs), plan_record)
    try:
        return _run(store, inputs, shards, job, started, progress=progress, engine=engine, scheduler=scheduler,
                    workers=workers, model=model if loaded_model else None, tokenizer=tokenizer)
    except BaseException:
        store.discard_if_empty()  # a run that failed before its first shard leaves no trace
        raise
    finally:
        store.close()


def _model_label(name: str | None, images: bool) -> str:
    """The model as the rows' header names it: a folder or hub id (aliases resolved)."""
    from attnflow.hf.load import resolve_model
    from attnflow.models import bundled_model_path

    if images:
        return name or str(bundled_model_path("digits_vit"))
    return resolve_model(name)


def _tokenizer(name: str | None) -> Any:
    from attnflow.hf.load import load_tokenizer

    return load_tokenizer(name)  # None: the default model


def _run(store: Store, inputs: Inputs, shards: list, job: BatchJob, started: float, *, progress: Progress | None,
         engine: str, scheduler: Any, workers: int | None, model: Any, tokenizer: Any) -> BatchRun:
    finished = store.finished()
    todo = [s for s in shards if s.name not in finished]
    total = len(inputs)
    done = sum(len(s.rows) for s in shards if s.name in finished)
    if progress is not None:
        progress(done, total)
    tasks = [ShardTask(s.name, s.rows, [inputs.ids[i] for i in s.rows], [inputs.values[i] for i in s.rows],
                       [inputs.labels[i] for i in s.rows], inputs.base) for s in todo]
    count = {"rows": done, "written": 0}

    def on_done(output: ShardOutput) -> None:
        store.write(output)
        count["rows"] += output.rows.num_rows // len(job.methods) + len(output.errors)
        count["written"] += 1
        if progress is not None:
            progress(count["rows"], total)

    description = "nothing to do"

    def result(interrupted: bool) -> BatchRun:
        seconds = time.perf_counter() - started
        totals = store.finish({"engine": description, "seconds": round(seconds, 3), "interrupted": interrupted,
                               "shards_written": count["written"], "rows": count["rows"] - done})
        return BatchRun(out=store.out, rows=total, explained=totals["explained"], failed=totals["failed"],
                        shards=len(shards), written=count["written"], skipped=len(shards) - len(todo),
                        seconds=seconds, engine=description, rows_this_run=count["rows"] - done)

    try:
        if not tasks:
            pass
        elif scheduler is not None:
            description = run_dask(tasks, job, on_done, scheduler=scheduler)
        elif engine == "local" or model is not None or len(tasks) == 1:
            description = run_local(tasks, job, on_done, model, tokenizer)
        elif engine == "dask":
            description = run_dask(tasks, job, on_done, workers=workers)
        else:
            description = run_auto(tasks, job, on_done, workers=workers)
    except KeyboardInterrupt as exc:
        raise BatchInterrupted(result(interrupted=True)) from exc
    return result(interrupted=False)


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a batch: ``run`` says what is in the folder (finished shards are kept; rerunning
    the same call finishes the rest)."""

    def __init__(self, run: BatchRun) -> None:
        super().__init__(f"interrupted; {run.written + run.skipped} of {run.shards} shards "
                         f"are written in {str(run.out)!r}")
        self.run = run
