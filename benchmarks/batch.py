"""attnflow batch vs a plain Python loop over attnflow.explain, on the paper's 2,000 agreement test sentences.

    PYTHONPATH=src python benchmarks/batch.py [--rows 2000] [--methods rollout flow]

For each method (CLS rows), in one run:

- loop (the baseline): ``for text in texts: attnflow.explain(text, model, tokenizer=..., method=m,
  target="cls")`` with the model loaded once beforehand (the load is not timed). Timed with 1 and with 2
  torch threads; the faster one is the baseline.
- local engine: ``attnflow.batch(..., engine="local")``: one process, batched forward passes, no Dask.
- default (``engine="auto"``), cold: what ``attnflow batch`` does with no options: shards run in the
  calling process while that looks quicker than starting a LocalCluster, which otherwise takes over
  (the engine column says which happened).
- Dask, cold: ``engine="dask"``: a LocalCluster of one worker process per core is started at once,
  each worker imports torch and loads the model, then every shard runs on the workers.
- Dask, warm: the same on a LocalCluster already running with the model loaded in its workers (what
  ``--scheduler`` gives on a long-lived cluster).

Every batch time is wall-clock from the call to its return, reading the input and writing the Parquet
files included. Ratios are loop time / batch time for the same rows. The rows of every batch run are
checked against the loop's (max |difference|).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def loop(texts: list[str], method: str, threads: int) -> tuple[float, dict]:
    import torch

    import attnflow

    torch.set_num_threads(threads)
    model, tokenizer = attnflow.load_model(None)
    attnflow.explain(texts[0], model, tokenizer=tokenizer, method=method, target="cls")  # compile / warm caches
    start = time.perf_counter()
    rows = {i: attnflow.explain(t, model, tokenizer=tokenizer, method=method, target="cls").row(method)
            for i, t in enumerate(texts)}
    return time.perf_counter() - start, rows


def batch(texts: list[str], method: str, out: Path, **options) -> tuple[float, list, str]:
    import pyarrow.dataset as ds

    import attnflow

    if out.exists():
        shutil.rmtree(out)
    start = time.perf_counter()
    run = attnflow.batch(texts, out=out, methods=method, target="cls", **options)
    seconds = time.perf_counter() - start
    assert run.explained == len(texts) and run.failed == 0, run.summary()
    table = ds.dataset(str(out / "rows"), format="parquet").to_table(columns=["row", "scores"]).to_pylist()
    return seconds, table, run.engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--methods", nargs="+", default=["rollout", "flow"])
    parser.add_argument("--loop-threads", nargs="+", type=int, default=[1, 2],
                        help="torch thread counts to time the loop with; the fastest is the baseline")
    args = parser.parse_args()

    import torch
    from distributed import Client, LocalCluster

    import attnflow
    from attnflow.batch.engine import default_workers
    from attnflow.hf.load import quiet_transformers
    from attnflow.data.agreement import splits

    quiet_transformers()
    texts = [e.text for e in splits(0, {"train": 0, "validation": 0, "test": args.rows, "unseen": 0})["test"]]
    tokens = [len(attnflow.load_model(None)[1](t)["input_ids"]) for t in texts[:200]]
    workers = default_workers()
    print(f"{len(texts)} agreement test sentences (~{np.mean(tokens):.1f} tokens each), bundled model, CLS rows; "
          f"{os.cpu_count()} cores, Dask workers: {workers} x 1 thread; torch {torch.__version__}")
    print(f"load average before (1/5/15 min; other jobs share these cores): {load()}")
    scratch = Path(tempfile.mkdtemp(prefix="attnflow-bench-batch-"))
    lines, engines = [], []
    try:
        cluster = None
        for method in args.methods:
            loops = {threads: loop(texts, method, threads) for threads in args.loop_threads}
            best = min(loops, key=lambda k: loops[k][0])
            base, reference = loops[best]
            torch.set_num_threads(1)
            runs = {"local engine (1 process)": batch(texts, method, scratch / "local", engine="local"),
                    "default engine (auto), cold": batch(texts, method, scratch / "auto"),
                    "Dask LocalCluster, cold": batch(texts, method, scratch / "cold", engine="dask")}
            if cluster is None:
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
                client = Client(cluster)
                batch(texts[:64], "flow", scratch / "warm-up", scheduler=client, shard_size=8)  # load the model
            runs["Dask LocalCluster, warm"] = batch(texts, method, scratch / "warm", scheduler=client)
            for threads, (seconds, _) in loops.items():
                lines.append((method, f"loop over explain, {threads} torch thread{'s' * (threads > 1)}"
                              + (" (baseline)" if threads == best else ""), seconds, base / seconds, None))
            for name, (seconds, table, engine) in runs.items():
                diff = max(float(np.abs(np.asarray(r["scores"]) - reference[r["row"]]).max()) for r in table)
                lines.append((method, name, seconds, base / seconds, diff))
                engines.append(f"{method}, {name}: {engine}")
            print(f"  {method}: done (load average now {load()})", flush=True)
        client.close()
        cluster.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{'method':<8} {'run':<44} {'wall s':>7} {'rows/s':>8} {'x loop':>7}  max|batch-loop|")
    for method, name, seconds, ratio, diff in lines:
        shown = "-" if diff is None else f"{diff:.1e}"
        print(f"{method:<8} {name:<44} {seconds:7.2f} {len(texts) / seconds:8.1f} {ratio:6.2f}x  {shown}")
    print("engines: " + "; ".join(engines))
    print(f"load average after: {load()}")


if __name__ == "__main__":  # Dask starts worker processes that import this file
    main()
