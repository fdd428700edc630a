"""Where shards run: in this process (``local``), or as Dask tasks (``dask``) on an embedded
``LocalCluster`` or on a cluster someone started (a scheduler address, a scheduler file or a
``distributed.Client``).

Workers compute and return each shard's tables; only this process writes files, in the order shards
finish, so the output folder needs no shared file system and a shard can never be written twice. A
worker that dies takes its shards in flight with it: the scheduler runs them again on another worker
(``distributed.scheduler.allowed-failures`` times, 3 by default) before the run gives up. Dask and
its scheduler are the distributed engine here: attnflow writes no scheduler of its own. On a
LocalCluster it starts itself, this process lends a hand while the workers start (see
``run_dask``).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attnflow.batch.shard import BatchJob, ShardOutput, ShardTask, loaded, run_shard
from attnflow.errors import AttnflowError

OnDone = Callable[[ShardOutput], None]


def run_local(tasks: Sequence[ShardTask], job: BatchJob, on_done: OnDone, model: Any = None,
              tokenizer: Any = None) -> str:
    for task in tasks:
        on_done(run_shard(task, job, model, tokenizer))
    return "local (this process)"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise AttnflowError("the Dask engine needs dask.distributed: pip install 'attnflow[scale]' "
                            "(or run with engine='local' / --engine local)") from exc
    return distributed


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def connect(scheduler: Any, workers: int | None = None) -> tuple[Any, Any, str]:
    """``(client, cluster to close or None, description)``. ``scheduler``: None (start a LocalCluster of
    ``workers`` single-threaded worker processes on 127.0.0.1, default one per core), an address
    ``tcp://HOST:PORT``, a scheduler file (JSON written by ``dask scheduler --scheduler-file``), or a
    ``distributed.Client`` (used as it is and left open)."""
    distributed = _distributed()
    if isinstance(scheduler, distributed.Client):
        return scheduler, None, f"dask ({scheduler.scheduler.address})"
    if scheduler is None:
        n = workers or default_workers()
        # The scheduler's HTTP server (health checks; the dashboard where bokeh is installed) runs even
        # without a dashboard: a free loopback port, so that two local runs never fight over 8787.
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
        try:
            return distributed.Client(cluster), cluster, f"dask LocalCluster, {n} worker process{'es' * (n > 1)}"
        except BaseException:
            cluster.close()
            raise
    text = str(scheduler)
    try:
        if Path(text).is_file() or text.endswith(".json"):
            if not Path(text).is_file():
                raise AttnflowError(f"no such scheduler file: {text!r}")
            client = distributed.Client(scheduler_file=text, timeout="20s")
        else:
            if "://" not in text and ":" not in text:
                raise AttnflowError(f"--scheduler must be an address like tcp://HOST:PORT or a scheduler file; "
                                    f"got {text!r}")
            client = distributed.Client(text, timeout="20s")
    except AttnflowError:
        raise
    except (OSError, TimeoutError, ValueError, AssertionError) as exc:  # distributed asserts on odd files
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AttnflowError(f"cannot reach the Dask scheduler at {text!r}: {reason}") from exc
    return client, None, f"dask ({client.scheduler.address})"


# What a worker process of a LocalCluster costs before its first shard: spawning, importing torch and
# transformers, loading the model (5-15 s measured on the 2-core machine, depending on its load).
WORKER_START_S = 10.0


def run_auto(tasks: Sequence[ShardTask], job: BatchJob, on_done: OnDone, *, workers: int | None = None) -> str:
    """The default on one machine: shards run in this process (shortest first) for as long as finishing
    here looks quicker than starting a LocalCluster, judged from the rate so far. With ``n`` workers the
    cluster wins when the work left here would take longer than ``WORKER_START_S * n / (n - 1)``; then
    the rest goes to the cluster, this process helping until the workers deliver (``run_dask``).
    So a job of a few seconds never waits for worker processes, and a long one uses every core."""
    n = workers or default_workers()
    order = list(tasks)
    loaded(job)  # before timing: the rate below should be the work, not this process's model load
    rows = seconds = 0.0
    here = 0
    while order:
        left = sum(len(t.rows) for t in order)
        if n > 1 and here and seconds / rows * left > WORKER_START_S * n / (n - 1):
            break
        task = order.pop(0)
        start = time.perf_counter()
        output = run_shard(task, job)
        seconds += time.perf_counter() - start
        rows += len(task.rows)
        here += 1
        on_done(output)
    if not order:
        return "local (this process; quicker than starting a cluster)"
    return run_dask(order, job, on_done, workers=n, help_here=True) + \
        f" (+ {here} shard{'s' * (here != 1)} in this process before it started)"


def run_dask(tasks: Sequence[ShardTask], job: BatchJob, on_done: OnDone, *, scheduler: Any = None,
             workers: int | None = None, help_here: bool = False) -> str:
    """Submit one task per shard (longest texts first, so that the slowest shards do not end the run
    alone) and hand each finished shard to ``on_done``. Ctrl-C cancels what has not finished.

    ``help_here`` (a LocalCluster started here): this process also computes shards while the workers
    start (each imports torch and loads the model before its first shard), taking them from the short
    end of the plan until the first worker result arrives and always leaving at least one shard per
    worker to the cluster. A shard taken here is cancelled on the cluster; should a worker have
    started it anyway, its result is dropped, since only the first result of a shard is written.
    """
    distributed = _distributed()
    client, cluster, description = connect(scheduler, workers)
    token = uuid.uuid4().hex[:8]  # keys unique per run on a long-lived scheduler
    order = list(tasks)  # the plan's order: shortest texts first
    futures: dict[str, Any] = {}
    helped = 0
    try:
        for task in reversed(order):
            futures[task.name] = client.submit(run_shard, task, job, key=f"attnflow-batch-{token}-{task.name}",
                                               pure=False)
        names = {future.key: name for name, future in futures.items()}
        pending = distributed.as_completed(list(futures.values()))
        spare = list(order) if help_here and cluster is not None else []
        reserved = len(cluster.workers) if cluster is not None else 0
        done: set[str] = set()
        warm = False
        while len(done) < len(order):
            if spare and not warm and not pending.has_ready() and len(order) - len(done) > reserved:
                task = spare.pop(0)
                if task.name not in done:
                    futures[task.name].cancel()
                    output = run_shard(task, job)
                    done.add(task.name)
                    helped += 1
                    on_done(output)
                continue
            for future in pending.next_batch(block=True):
                name = names[future.key]
                if future.status == "cancelled" or name in done:
                    continue
                output = _result(distributed, future, name)
                warm = True
                done.add(name)
                on_done(output)
    except BaseException:
        if futures:
            client.cancel(list(futures.values()))
        raise
    finally:
        if not isinstance(scheduler, distributed.Client):
            client.close()
        if cluster is not None:
            cluster.close()
    return description + (f" (+ {helped} shard{'s' * (helped != 1)} in this process while they started)"
                          if helped else "")


def _result(distributed: Any, future: Any, name: str) -> ShardOutput:
    try:
        return future.result()
    except AttnflowError as exc:
        raise AttnflowError(f"shard {name} failed on a worker: {exc}") from exc
    except Exception as exc:  # noqa: BLE001  KilledWorker, a missing attnflow on a worker, ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise AttnflowError(f"shard {name} failed on a worker ({type(exc).__name__}: {reason}); every worker needs "
                            "the same attnflow installed, and the model readable") from exc
