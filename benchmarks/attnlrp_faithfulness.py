"""AttnLRP beside ablated flow and its one-pass estimate, against deletion leave-one-out, on SmolLM2-135M.

    PYTHONPATH=src nice -n 10 python benchmarks/attnlrp_faithfulness.py [--out FILE.json]

The 70 prompts of ``benchmarks/decoder_prompts.py`` (5-28 tokens), explaining the last position's
argmax token (its logit). Per prompt, in one run, one torch thread: deletion leave-one-out
(``attnflow.interventions.ablation.occlusion``: the logit's drop when a token is deleted; the ground truth),
exact ablated flow (value zeroing in every layer at once), its one-pass estimate (attribution
patching) and AttnLRP (``attnflow.interventions.attnlrp``), each method's CPU time against one plain forward
pass of the same prompt (median of three). Ranked positions: 1 .. n-2 (the first token, the
attention sink, and the explained last token left out, as ``benchmarks/decoder_study.py`` does).
Reported: mean Spearman rho against deletion and against exact ablated flow, over all prompts and over
the prompts of 8 tokens or more; the load average is printed (the box is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_prompts import prompts  # noqa: E402

from attnflow.interventions.ablation import ablated_flow, occlusion  # noqa: E402
from attnflow.interventions.attnlrp import attnlrp  # noqa: E402
from attnflow.interventions.attribution_patching import attribution_patching  # noqa: E402
from attnflow.hf.load import load_model  # noqa: E402
from attnflow.hf.pypi_models import smollm2_path  # noqa: E402
from attnflow.evaluation.correlation import spearman  # noqa: E402

METHODS = {
    "ablated-flow": lambda m, ids: ablated_flow(m, ids).scores[0, 0],
    "ablated-flow-estimate": lambda m, ids: attribution_patching(m, ids).scores[0, 0],
    "attnlrp": lambda m, ids: attnlrp(m, ids).relevance[0],
}


def timed(f):
    start = time.process_time()
    out = f()
    return out, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model(smollm2_path())[:2]
    rows = []
    for item in prompts():
        ids = tokenizer(item["prompt"], add_special_tokens=False)["input_ids"]
        n = len(ids)
        positions = list(range(1, n - 1))
        with torch.no_grad():
            forward = statistics.median(timed(lambda: model(input_ids=torch.tensor([ids])))[1] for _ in range(3))
        deletion = occlusion(model, ids).scores[0, 0]
        row = {"kind": item["kind"], "n": n, "methods": {}}
        scores = {name: timed(lambda f=f: f(model, ids)) for name, f in METHODS.items()}
        for name, (s, cpu) in scores.items():
            row["methods"][name] = {"deletion": float(spearman(s[positions], deletion[positions])),
                                    "ablated_flow": float(spearman(s[positions], scores["ablated-flow"][0][positions])),
                                    "passes": cpu / forward}
        rows.append(row)
    print(f"load average {os.getloadavg()}; SmolLM2-135M, {len(rows)} prompts, positions 1..n-2, one thread")
    print(f"{'method':<24} {'vs deletion':>11} {'(n>=8)':>7} {'vs ablated flow':>15} {'(n>=8)':>7} {'x forward':>9}")
    summary = {}
    for name in METHODS:
        def mean(key, rows=rows, name=name, least=0):
            values = [r["methods"][name][key] for r in rows if r["n"] >= least]
            return float(np.nanmean(values))
        summary[name] = {"deletion": mean("deletion"), "deletion_8": mean("deletion", least=8),
                         "ablated_flow": mean("ablated_flow"), "ablated_flow_8": mean("ablated_flow", least=8),
                         "passes_median": float(np.median([r["methods"][name]["passes"] for r in rows]))}
        s = summary[name]
        print(f"{name:<24} {s['deletion']:>+11.3f} {s['deletion_8']:>+7.3f} {s['ablated_flow']:>+15.3f} "
              f"{s['ablated_flow_8']:>+7.3f} {s['passes_median']:>9.1f}")
    print(f"prompts of 8 tokens or more: {sum(r['n'] >= 8 for r in rows)}")
    if args.out:
        Path(args.out).write_text(json.dumps({"load": os.getloadavg(), "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
