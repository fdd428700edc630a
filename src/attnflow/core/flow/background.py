"""Long flow runs: an estimate first, progress as rows finish, and Ctrl-C honoured at once.

A compiled solver (numba) cannot be interrupted inside a call: Python sees Ctrl-C only when the call
returns, which on a long input can be minutes (one row of a 380-token, 30-layer graph takes seconds).
So :func:`run`

1. estimates the work (:mod:`.estimate`) and hands the estimate to ``progress.estimate`` when the
   progress callback has that method (the CLI prints it), and warns (:class:`LongFlowWarning`)
   above ``WARN_SECONDS``;
2. asks the solver for one layer at a time, so that progress ticks as rows finish;
3. when one solver call may take longer than ``INTERRUPT_SECONDS``, runs the solve in a child
   process (a fresh interpreter running :func:`child_main`; not ``multiprocessing``, whose "spawn"
   re-imports the caller's ``__main__`` script) and waits on it in short slices: Ctrl-C kills the
   child and raises ``KeyboardInterrupt`` in the caller within a fraction of a second. The graph
   and the output travel as ``.npy`` files in ``/dev/shm`` (memory, not disk, where it exists); the
   child dies with its parent (Linux ``PR_SET_PDEATHSIG``).

Nothing here changes the numbers: the same solver fills the same output array.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from attnflow.core.flow.estimate import WARN_SECONDS, FlowEstimate, estimate
from attnflow.errors import AttnflowError, LongFlowWarning

INTERRUPT_SECONDS = 0.5  # longest solver call we let run in the caller's process
CHILD_START_SECONDS = 3.0  # python + numpy + torch + numba imports and the solver's compiled cache
PROGRESS = b"attnflow-progress "
FAILED = b"attnflow-error "


class ByLayer:
    """A solver that is handed one layer at a time (same contract and result as ``solve``), so
    that its progress ticks, and Ctrl-C between calls acts, after every layer's rows."""

    def __init__(self, solve: Callable[..., np.ndarray]) -> None:
        self.solve = solve

    def __call__(self, a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
                 progress: Callable[[int], None] | None = None) -> np.ndarray:
        return np.concatenate([self.solve(a, np.asarray([layer]), positions, progress=progress) for layer in layers])


def first_graph(a: np.ndarray, mask: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Graph 0 of ``a`` ``(batch, heads, L, n, n)`` without its padding, and ``positions`` in it."""
    if mask[0].all():  # no copy of a graph that may be gigabytes
        return a[0, 0], [int(p) for p in positions]
    real = np.flatnonzero(mask[0])
    index = -np.ones(mask.shape[1], dtype=np.int64)
    index[real] = np.arange(len(real))
    inside = [int(index[p]) for p in positions if index[p] >= 0] or [len(real) - 1]
    return np.ascontiguousarray(a[0, 0][:, real][:, :, real]), inside


def run(work: Callable[..., None], solve: Callable[..., np.ndarray], a: np.ndarray, mask: np.ndarray,
        layers: np.ndarray, positions: np.ndarray, out: np.ndarray, tick: Callable[[int], None],
        progress: Any = None) -> FlowEstimate:
    """``work(solver, a, mask, layers, positions, out, tick)`` (flow's loop over examples and heads,
    filling ``out``) with the estimate, the warning and the child process described above."""
    graph, inside = first_graph(a, mask, positions)
    found = estimate(solve, graph, [int(x) for x in layers], inside, graphs=a.shape[0] * a.shape[1])
    in_child = found.longest_row * min(len(positions), 8) > INTERRUPT_SECONDS
    if in_child:
        found = replace(found, seconds=found.seconds + CHILD_START_SECONDS,
                        how=f"{found.how}; plus ~{CHILD_START_SECONDS:.0f} s to start a worker process")
    notify = getattr(progress, "estimate", None)
    if callable(notify):
        notify(found)
    if found.seconds > WARN_SECONDS:
        warnings.warn(LongFlowWarning(f"{found}; pass progress=... to follow it; Ctrl-C stops it"), stacklevel=4)
    solver = ByLayer(solve)
    if in_child:
        run_in_child(work, (solver, a, mask, layers, positions, out), outputs=(5,), tick=tick)
    else:
        work(solver, a, mask, layers, positions, out, tick)
    return found


@dataclass(frozen=True)
class _Array:
    path: str


def _scratch() -> str:
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()
    _sweep(base)
    return tempfile.mkdtemp(prefix=f"attnflow-flow-{os.getpid()}-", dir=base)


def _sweep(base: str) -> None:
    """Remove the scratch folders of processes that no longer exist (a caller killed by a signal
    Python does not handle, such as SIGTERM, runs no ``finally``; its worker died with it)."""
    for path in glob.glob(os.path.join(base, "attnflow-flow-*-*")):
        try:
            os.kill(int(os.path.basename(path).split("-")[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, PermissionError, IndexError):
            pass


def _pump(stream: Any, lines: queue.Queue) -> None:
    for line in iter(stream.readline, b""):
        lines.put(line)
    lines.put(None)


def run_in_child(work: Callable[..., None], args: tuple, outputs: tuple[int, ...], tick: Callable[[int], None]) -> None:
    """Call ``work(*args, tick)`` in a child interpreter; arrays in ``args`` are passed as files
    and those at ``outputs`` copied back. Ctrl-C (or any error here) kills the child."""
    folder = _scratch()
    proc = None
    try:
        spec = []
        for i, value in enumerate(args):
            if isinstance(value, np.ndarray):
                path = os.path.join(folder, f"{i}.npy")
                np.save(path, value)
                spec.append(_Array(path))
            else:
                spec.append(value)
        payload = pickle.dumps((work, spec), protocol=pickle.HIGHEST_PROTOCOL)
        env = dict(os.environ, ATTNFLOW_PARENT=str(os.getpid()),
                   PYTHONPATH=os.pathsep.join(dict.fromkeys(p for p in sys.path if p)))
        try:
            import numba

            env["NUMBA_NUM_THREADS"] = str(numba.get_num_threads())
        except ImportError:
            pass
        entry = "from attnflow.core.flow.background import child_main; child_main()"
        proc = subprocess.Popen([sys.executable, "-c", entry], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        proc.stdin.write(len(payload).to_bytes(8, "little") + payload)
        proc.stdin.flush()
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        error, ticked = None, False
        while True:
            try:
                line = lines.get(timeout=0.2)  # a short wait: KeyboardInterrupt lands here at once
            except queue.Empty:
                if ticked:  # lets a progress callback that stops the work (the app's cancel) act at once
                    tick(0)
                continue
            if line is None:
                break
            if line.startswith(PROGRESS):
                ticked = True
                tick(int(line[len(PROGRESS):]))
            elif line.startswith(FAILED):
                error = line[len(FAILED):].decode("utf-8", "replace").strip()
        code = proc.wait()
        if error is not None or code != 0:
            raise AttnflowError(f"the flow worker process failed: {error or f'exit status {code}'}")
        for i in outputs:
            args[i][...] = np.load(os.path.join(folder, f"{i}.npy"))
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        shutil.rmtree(folder, ignore_errors=True)


def _die_with_parent() -> None:
    parent = int(os.environ.get("ATTNFLOW_PARENT", "0"))
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: killed when the parent exits
    if parent and os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def child_main() -> None:
    """The child's side of :func:`run_in_child` (stdin: the job; stdout: progress lines)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent decides
    _die_with_parent()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    size = int.from_bytes(stdin.read(8), "little")
    work, spec = pickle.loads(stdin.read(size))
    args = [np.load(v.path, mmap_mode="r+") if isinstance(v, _Array) else v for v in spec]

    def tick(k: int) -> None:
        stdout.write(PROGRESS + str(int(k)).encode() + b"\n")
        stdout.flush()

    try:
        work(*args, tick)
        for value in args:
            if isinstance(value, np.memmap):
                value.flush()
    except BaseException as exc:  # reported to the parent, which raises it as an AttnflowError
        stdout.write(FAILED + f"{type(exc).__name__}: {exc}".replace("\n", " ").encode() + b"\n")
        stdout.flush()
        os._exit(1)
    stdout.flush()
