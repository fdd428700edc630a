"""Flow on long inputs: how good the up-front estimate is, what starting the cancellable worker
costs, and how fast Ctrl-C acts.

    PYTHONPATH=src python benchmarks/long_flow.py [--cases minilm:128 minilm:256 ...] [--interrupts 3]

- estimate vs actual: ``attnflow.flow`` on the captured (head-fused) maps of a real model, the
  default target's row at every layer; the estimate is the one flow() hands to ``progress.estimate``
  before solving (calibration included in "actual", as a user waits for both).
- worker start: a long job runs on a second thread of the caller's process (``attnflow.api.flowrun``,
  no new interpreter since issue 25): the time ``in_thread`` adds to an empty job, against the goal
  of 0.5 s.
- Ctrl-C: ``attnflow explain TEXT --method flow --json OUT`` on a ~300-token SmolLM2 input; SIGINT a
  few seconds after the estimate is printed; the time from the signal to the process's exit, and
  whether OUT (or a temporary beside it) exists afterwards.

Run it alone on the machine: ``flock -x /work/locks/heavy.lock python benchmarks/long_flow.py``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory import _load, load, make_text  # noqa: E402


class Recorder:
    def __init__(self) -> None:
        self.found = None
        self.ticks = 0

    def __call__(self, done: int, total: int) -> None:
        self.ticks += 1

    def estimate(self, found) -> None:
        self.found = found


def estimate_vs_actual(cases: list[str], threads: int) -> None:
    import torch

    import attnflow
    from attnflow.capture.text import capture

    torch.set_num_threads(1)
    print(f"{'case':<14} {'rows':>5} {'estimate s':>10} {'actual s':>9} {'actual/estimate':>15}  how")
    loaded = {}
    for case in cases:
        name, n = case.split(":")[0], int(case.split(":")[1])
        if name not in loaded:
            loaded[name] = _load(name)
        model, tokenizer = loaded[name]
        maps = capture(model, tokenizer, make_text(tokenizer, n), head_fusion="mean")
        target = len(maps.tokens) - 1 if maps.causal else 0
        rec = Recorder()
        start = time.perf_counter()
        attnflow.flow(maps, positions=[target], progress=rec)
        actual = time.perf_counter() - start
        found = rec.found
        print(f"{case:<14} {found.rows:>5} {found.seconds:>10.1f} {actual:>9.1f} {actual / found.seconds:>15.2f}  "
              f"{found.how}", flush=True)


def worker_start(repeats: int = 20) -> None:
    import numpy as np

    from attnflow.api import flowrun
    from attnflow.core.flow import FlowJob

    def empty(*args, **kwargs):
        return np.zeros((1, 1, 4))

    times = []
    for _ in range(repeats):
        job = FlowJob(solve=empty, a=np.zeros((1, 1, 1, 4, 4)), mask=np.ones((1, 4), bool), layers=np.array([0]),
                      positions=np.array([0]), out=np.zeros((1, 1, 1, 1, 4)), tick=lambda k: None)
        start = time.perf_counter()
        flowrun.in_thread(job)
        times.append(time.perf_counter() - start)
    print(f"worker start (a thread; median of {repeats} empty jobs): {np.median(times) * 1e3:.2f} ms "
          f"(goal <= 500 ms); load average {load()}", flush=True)


def interrupt_latency(repeats: int) -> None:
    # ~300 tokens through SmolLM2's 30 layers: about half a minute with the certified solver, so every
    # signal (1, 2, 3 ... s into the solve) lands while it runs (a 500-token MiniLM input ends in ~4 s)
    model = "smollm2"
    text = " ".join(["the quick brown fox jumps over the lazy dog near the river bank"] * 23)
    for i in range(repeats):
        folder = tempfile.mkdtemp(prefix="attnflow-ctrlc-")
        out = os.path.join(folder, "flow.json")
        command = [sys.executable, "-m", "attnflow", "explain", text, "--model", model, "--method", "flow", "--json", out]
        # SIGINT as a terminal's Ctrl-C meets it (a shell's background job would leave it ignored)
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.set_blocking(proc.stderr.fileno(), False)
        seen = b""
        while b"Ctrl-C stops it" not in seen and proc.poll() is None:
            seen += proc.stderr.read() or b""
            time.sleep(0.05)
        time.sleep(1 + i)  # inside the solve, at different points
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.wait()
        latency = time.perf_counter() - sent
        left = os.listdir(folder)
        print(f"Ctrl-C {i + 1}: exit status {proc.returncode} after {latency:.2f} s; files left in the output folder: "
              f"{left or 'none'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=["minilm:128", "minilm:256", "minilm:384", "minilm:512",
                                                       "smollm2:128", "smollm2:256"])
    parser.add_argument("--interrupts", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="numba threads for the flow engine")
    args = parser.parse_args()
    import numba

    numba.set_num_threads(args.threads)
    print(f"numba threads: {args.threads}; load average before (1/5/15 min): {load()}")
    estimate_vs_actual(args.cases, args.threads)
    print(f"load average: {load()}")
    worker_start()
    interrupt_latency(args.interrupts)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
