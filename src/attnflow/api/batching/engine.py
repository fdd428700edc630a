"""Where shards run: in this process (``local``), or as Dask tasks (``dask``) on an embedded
``LocalCluster`` or on a cluster someone started (a scheduler address, a scheduler file or a
``distributed.Client``).

Workers compute and return each shard's tables; only this process writes files, in the order shards
finish, so the output folder needs no shared file system and a shard can never be written twice. A
worker that dies takes its shards in flight with it: the scheduler runs them again on another worker
(``distributed.scheduler.allowed-failures`` times, 3 by default) before the run gives up. Dask and
its scheduler are the distributed engine here: attnflow writes no scheduler of its own.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attnflow.api.batching.shard import Settings, ShardOutput, ShardTask, run_shard
from attnflow.errors import AttnflowError

OnDone = Callable[[ShardOutput], None]


def run_local(tasks: Sequence[ShardTask], settings: Settings, on_done: OnDone, model: Any = None,
              tokenizer: Any = None) -> str:
    for task in tasks:
        on_done(run_shard(task, settings, model, tokenizer))
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
    except (OSError, TimeoutError, ValueError) as exc:
        raise AttnflowError(f"cannot reach the Dask scheduler at {text!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    return client, None, f"dask ({client.scheduler.address})"


def run_dask(tasks: Sequence[ShardTask], settings: Settings, on_done: OnDone, *, scheduler: Any = None,
             workers: int | None = None) -> str:
    """Submit one task per shard (longest texts first, so the slowest shards do not end the run
    alone) and hand each finished shard to ``on_done``. Ctrl-C cancels what has not finished."""
    distributed = _distributed()
    client, cluster, description = connect(scheduler, workers)
    token = uuid.uuid4().hex[:8]  # keys unique per run on a long-lived scheduler
    futures = []
    try:
        futures = [client.submit(run_shard, task, settings, key=f"attnflow-batch-{token}-{task.name}", pure=False)
                   for task in reversed(list(tasks))]
        for future in distributed.as_completed(futures):
            try:
                output = future.result()
            except distributed.client.FutureCancelledError:
                raise
            except AttnflowError as exc:
                raise AttnflowError(f"shard {_name(future)} failed on a worker: {exc}") from exc
            except Exception as exc:  # noqa: BLE001  KilledWorker, a missing attnflow on a worker, ...
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise AttnflowError(f"shard {_name(future)} failed on a worker ({type(exc).__name__}: {reason}); "
                                    "every worker needs the same attnflow installed, and the model readable") from exc
            on_done(output)
    except BaseException:
        if futures:
            client.cancel(futures)
        raise
    finally:
        if scheduler is None or not isinstance(scheduler, distributed.Client):
            client.close()
        if cluster is not None:
            cluster.close()
    return description


def _name(future: Any) -> str:
    return str(future.key).rsplit("-", 2)[-2] + "-" + str(future.key).rsplit("-", 1)[-1]
