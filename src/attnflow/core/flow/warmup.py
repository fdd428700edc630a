"""Compile every numba signature the flow solvers use, once, into numba's on-disk cache.

numba compiles a solver the first time it is called in a process whose cache holds no machine code
for it (a new machine, a new version of attnflow, an emptied cache): about a minute of CPU for the
certified solver, the dense engine and their thread paths together, paid by whichever command
happens to run flow first. ``make setup`` (the README's set-up command) runs this module once so
that no later command pays it::

    python -m attnflow.core.flow.warmup

Where the cache lives: next to the modules (``__pycache__``) when that folder is writable, else
numba's per-user cache folder (so a wheel installed read-only still caches), or ``NUMBA_CACHE_DIR``
when set. ``compiled`` tells whether the cache already holds the solvers (the api prints a
one-line notice with the expected time before compiling when it does not).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from attnflow.core.flow import auto, certified, cuts, engine

# Measured on a 2-core machine (docs/performance.md): the whole warm-up, cold, under load.
# Both capacity types (float32 and float64) since issue 31: 115 s of CPU cold on 2 loaded cores,
# against 56 s for float64 alone in the same run.
EXPECTED_SECONDS = "about 2 minutes"


def kernels() -> list:
    """The compiled entry points of the solvers (each compiles what it calls)."""
    return [certified._tasks, engine._rows, engine._rows_serial, engine._source_sinks, cuts.sums]


def compiled() -> bool:
    """Whether numba's cache already holds machine code for every solver entry point (then a new
    process loads it in well under a second); False on a fresh install or an emptied cache."""
    for kernel in kernels():
        if kernel.signatures:  # compiled or loaded in this process
            continue
        cache = getattr(kernel, "_cache", None)
        index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
        if index is None or not os.path.exists(index):
            return False
    return True


def compile_all() -> None:
    """Run every solver path once on small graphs: the serial and thread-pool paths of the engine
    and of the certified solver, the race of ``"auto"`` and the single-sink calls it makes."""
    rng = np.random.default_rng(1)
    a64 = rng.dirichlet(np.ones(20), size=(3, 20))
    a64 = 0.5 * a64 + 0.5 * np.eye(20)
    # float32: what attnflow.flow passes from captured maps; float64: arrays users pass themselves
    for a in (a64.astype(np.float32), a64):
        _compile(a)


def _compile(a: np.ndarray) -> None:
    """Every solver path on ``a`` (one numba signature per capacity type)."""
    layers, positions = np.array([0, 1, 2]), np.arange(20)
    serial = engine.SERIAL_WORK
    try:
        for work in (serial, 0):  # 0: the thread pools even on this small graph
            engine.SERIAL_WORK = work
            engine.solve(a, layers, positions)
            certified.solve(a, layers, positions)
            auto.solve(a, layers, positions)
    finally:
        engine.SERIAL_WORK = serial
    certified.solve_sinks(a, 3, 0, np.arange(4))
    engine.solve_sinks(a, 3, 0, np.arange(4))
    # With NUMBA_NUM_THREADS=1 (a one-core container, a CI job) the solvers above never take their
    # thread-pool path, so its kernel is compiled here directly: the cache then holds every kernel
    # ``compiled`` checks, whatever thread count a later process runs with.
    tops, qs = np.array([3]), np.array([0])
    engine._rows(np.ascontiguousarray(a), tops, qs, 1, np.zeros((1, 20)), engine.never())


def main() -> None:
    start = time.perf_counter()
    was = compiled()
    if not was:
        print(f"attnflow: compiling the flow solvers with numba ({EXPECTED_SECONDS} of CPU, once per machine)",
              file=sys.stderr, flush=True)
    compile_all()
    how = "loaded from numba's cache" if was else "compiled and cached"
    print(f"attnflow: flow solvers {how} in {time.perf_counter() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
