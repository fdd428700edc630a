"""How the api runs a flow computation: an estimate first, a warning for long runs, and a solve that
Ctrl-C (or the app's cancel) stops between two sinks.

``attnflow.core.flow.flow`` builds a ``FlowJob`` and hands it to a
runner; the api passes ``run``, which

1. estimates the work (``attnflow.core.flow.estimate``) and hands the estimate to
   ``progress.estimate`` when the progress callback has that method (the CLI prints it), and warns
   (``LongFlowWarning``) above ``WARN_SECONDS``; the estimate is timed only
   when it is read or the rough guess is above ``WARN_SECONDS``, since timing rows on smaller
   graphs costs a good part of a short run;
2. when one solver call may take longer than ``INTERRUPT_SECONDS``, solves on a second thread of
   this process and waits for it in short slices. The compiled solvers release the GIL and read
   the job's cancel flag between sinks, so on Ctrl-C (``KeyboardInterrupt`` lands in the waiting
   thread at once) the flag is set, the solver stops after the sink it is on, and
   ``KeyboardInterrupt`` is raised. A progress callback that raises (the app's cancel) is called
   from the waiting thread every slice and stops the run the same way. numba's thread count is
   per thread (a new thread starts with all cores): the solve gets the caller's, so that a batch
   shard, the app or a benchmark that set it keeps it on long flows too. A run on the calling
   thread stops at Ctrl-C after the solver call it is in; a ``KeyboardInterrupt`` that lands inside
   a compiled call comes out of numba as a ``SystemError`` caused by it, and is raised as the
   ``KeyboardInterrupt`` it is.

No second interpreter, no files, no signals: the solve shares the caller's memory and its compiled
code. Short runs (the common case: a row of a sentence) run on the calling thread, with nothing
added but the estimate's rough guess.

Before numba compiles the solvers (a fresh install whose cache is empty: ``make setup`` compiles
them ahead, see ``attnflow.core.flow.warmup``) one line on stderr says so and for how long.
"""

from __future__ import annotations

import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Any

from attnflow.core.flow import FlowCancelled, FlowJob
from attnflow.core.flow import flow as core_flow
from attnflow.core.flow.estimate import WARN_SECONDS, FlowEstimate, estimate, guess_seconds
from attnflow.errors import LongFlowWarning

COMPILED = {f"attnflow.core.flow.{name}" for name in ("auto", "certified", "engine")}  # numba solvers
INTERRUPT_SECONDS = 0.5  # longest solver call we run on the caller's thread
SLICE_SECONDS = 0.1  # how often the waiting thread looks up (Ctrl-C lands within one slice)


def run(job: FlowJob) -> FlowEstimate | None:
    """Run ``job`` with the estimate, the warning and the cancellable thread described above.

    The estimate is measured (``estimate``, which times rows on
    smaller copies of the graph) only when someone reads it: a progress callback with an
    ``estimate`` method, or a rough guess above ``WARN_SECONDS`` that may deserve a warning.
    Otherwise the rough guess alone decides whether the solve goes to the thread. Returns the
    estimate when one was made."""
    if not _noticed and getattr(job.solve, "__module__", "") in COMPILED:
        from attnflow.core.flow import warmup

        if not warmup.compiled():
            notice()
    with _keyboard_interrupts():
        return _run(job)


@contextmanager
def _keyboard_interrupts():
    """Ctrl-C that lands while the calling thread is inside a compiled (numba) call surfaces as
    ``SystemError: ... returned a result with an exception set``, the ``KeyboardInterrupt`` as its
    cause: raise the ``KeyboardInterrupt`` itself, which the CLI and the app handle."""
    try:
        yield
    except SystemError as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise


def _run(job: FlowJob) -> FlowEstimate | None:
    graph, inside = job.first_graph()
    layers = [int(x) for x in job.layers]
    n = graph.shape[-1]
    notify = getattr(job.progress, "estimate", None)
    found = None
    if callable(notify) or guess_seconds(n, layers, len(inside) * job.graphs) > WARN_SECONDS:
        found = estimate(job.solve, graph, layers, inside, graphs=job.graphs)
        if callable(notify):
            notify(found)
        if found.seconds > WARN_SECONDS:
            hint = "" if job.progress is not None else "; pass progress=... to follow it"
            warnings.warn(LongFlowWarning(f"{found}{hint}; Ctrl-C stops it"), stacklevel=5)
    longest = found.longest_row if found is not None else guess_seconds(n, [max(layers)], 1)
    if longest * min(len(job.positions), 8) > INTERRUPT_SECONDS:
        in_thread(job)
    else:
        job.run()
    return found


_noticed = False


def notice() -> None:
    """One line, once per process, before numba compiles the solvers (a fresh install that skipped
    ``make setup``)."""
    global _noticed
    _noticed = True
    from attnflow.core.flow import warmup

    print(f"attnflow: compiling the flow solvers with numba, once per machine ({warmup.EXPECTED_SECONDS}; "
          "`python -m attnflow.core.flow.warmup` does it ahead)", file=sys.stderr, flush=True)


def in_thread(job: FlowJob) -> None:
    """``job.run()`` on a second thread; the calling thread waits in slices of ``SLICE_SECONDS``,
    so that ``KeyboardInterrupt`` (or an exception from ``job.progress``) cancels the job: the
    solver stops between sinks and the exception is raised here once it has."""
    failed: list[BaseException] = []
    ticked = threading.Event()
    tick = job.tick

    def ticking(k: int) -> None:
        ticked.set()
        tick(k)

    job.tick = ticking
    numba = sys.modules.get("numba")  # loaded with a compiled solver; the others never read it
    threads = numba.get_num_threads() if numba is not None else None

    def work() -> None:
        try:
            if threads is not None:
                numba.set_num_threads(threads)
            job.run()
        except BaseException as exc:  # raised in the caller's thread below
            failed.append(exc)

    worker = threading.Thread(target=work, name="attnflow-flow", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(SLICE_SECONDS)
            if worker.is_alive() and ticked.is_set():
                tick(0)  # lets a progress callback that stops the work (the app's cancel) act at once
    except BaseException:
        job.cancel[0] = True
        worker.join()  # the solver returns after the sink it is on
        raise
    finally:
        job.tick = tick
    if failed and not isinstance(failed[0], FlowCancelled):
        raise failed[0]


def flow(attentions: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("runner", run)
    return core_flow(attentions, **kwargs)


flow.__doc__ = (f"{core_flow.__doc__}\n\n    Run by ``attnflow.api.flowrun.run``: the estimate, the warning and "
                "Ctrl-C between sinks.")
