"""The extra time a short input's report spends measuring faithfulness on the fly (attnflow.api.defaults).

    nice -n 10 env PYTHONPATH=src python benchmarks/report_faithfulness.py [--threads 1] [--repeat 3]

SmolLM2-135M, a 30-token prompt, the maps `attnflow explain --html` computes (raw, rollout, flow for
every target up to 128 tokens): ``attnflow.explain_maps`` attaches the on-the-fly faithfulness
numbers itself (leave-one-out for every computed method), so the run times it whole and then the
numbers alone, :func:`attnflow.api.defaults.with_faithfulness` on the same result with them taken
out (the same computation); the maps without them are the difference. CPU seconds (process_time)
beside wall seconds; the load average with every row. Goal: <= 2 s extra.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import torch

import attnflow
from attnflow.api.defaults import with_faithfulness

TEXT = ("Anna lives in Berlin and works as a nurse at the old hospital near the river. Q: Where does Anna "
        "live? A: Anna lives in")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = attnflow.load_model("smollm2")
    n = len(tokenizer(TEXT)["input_ids"])
    print(f"SmolLM2-135M, {n} tokens, {args.threads} torch thread(s)")
    print("| run | explain_maps (report) CPU s (wall) | of it, faithfulness on the fly CPU s (wall) "
          "| extra / maps | load |")
    print("|---|---|---|---|---|")
    for run in range(args.repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        result = attnflow.explain_maps(TEXT, model, tokenizer=tokenizer, methods=["raw", "rollout", "flow"])
        whole = (time.process_time() - cpu, time.perf_counter() - wall)
        assert "faithfulness" in result.meta, "explain_maps no longer attaches the numbers: time them another way"
        bare = replace(result, meta={k: v for k, v in result.meta.items() if k != "faithfulness"})
        cpu, wall = time.process_time(), time.perf_counter()
        again = with_faithfulness(bare, model, tokenizer)
        extra = (time.process_time() - cpu, time.perf_counter() - wall)
        assert "faithfulness" in again.meta
        maps = whole[0] - extra[0]
        a, b, c = os.getloadavg()
        print(f"| {run + 1} | {whole[0]:.2f} ({whole[1]:.2f}) | {extra[0]:.2f} ({extra[1]:.2f}) "
              f"| {extra[0] / maps:.2f} | {a:.2f} {b:.2f} {c:.2f} |")


if __name__ == "__main__":
    main()
