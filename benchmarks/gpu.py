"""GPU against CPU on the same machine: capture, rollout tracked through generation, and the decoder
methods, on SmolLM2-135M and (when installed) Gemma 3 270M.

    PYTHONPATH=src python benchmarks/gpu.py [--models smollm2 gemma3] [--repeat 3]

Each case runs once to warm up, then ``--repeat`` times on each device; the table prints the median
wall time per device and the GPU/CPU ratio (below 1: the GPU is faster). Times are wall clock with
``torch.cuda.synchronize()`` before each reading. Needs a CUDA GPU: on a machine without one it says
so and exits with status 0 (attnflow never needs a GPU to install or to pass its tests).

Cases: ``explain`` (one capture with rollout, 200 tokens of prose), ``generate`` (20 tokens, rollout
tracked through generation), ``ablated-flow`` (the exact per-source method, 60 tokens), and each
decoder method the registry offers for text that runs the model, on the 60-token prompt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

PROSE = ("The committee met on a grey morning to decide where the new library would stand. Some wanted "
         "the old mill by the river, whose walls were thick and whose windows faced the water; others "
         "argued for the square, where every bus stopped and the market filled the streets on Saturdays. ")


def timed(run, device: str, repeat: int) -> float:
    import torch

    def once() -> float:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start

    once()  # warm-up: kernels, caches, the first load
    return statistics.median(once() for _ in range(repeat))


def cases(model_name: str) -> list[tuple[str, object]]:
    import attnflow
    from attnflow.config import registry

    long_text = (PROSE * 4)[:1100]
    short = PROSE[:300]
    out = [("explain rollout (200 tok)", lambda device: attnflow.explain(long_text, model_name, device=device,
                                                                         paper_only=True, truncate=True)),
           ("generate 20 tokens", lambda device: attnflow.generate(model_name, None, short, 20, method="rollout",
                                                                   device=device))]
    for record in registry.methods("text"):
        if record.needs_model and not record.classifiers_only:
            out.append((f"{record.name} (60 tok)",
                        lambda device, m=record.name: attnflow.explain(short, model_name, method=m, device=device,
                                                                       paper_only=True)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: torch sees no CUDA GPU on this machine; nothing measured "
              f"(torch {torch.__version__}, load average {os.getloadavg()[0]:.2f})")
        return
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"CPU threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'model':10} {'case':34} {'cpu s':>8} {'gpu s':>8} {'gpu/cpu':>8}")
    for name in args.models:
        try:
            todo = cases(name)
            todo[0][1]("cpu")  # fails early when the model is not installed
        except Exception as exc:  # noqa: BLE001 - a model that is not installed is reported, not fatal
            print(f"{name:10} skipped: {exc}")
            continue
        for label, run in todo:
            cpu = timed(lambda: run("cpu"), "cpu", args.repeat)
            gpu = timed(lambda: run("cuda"), "cuda", args.repeat)
            print(f"{name:10} {label:34} {cpu:8.3f} {gpu:8.3f} {gpu / cpu:8.2f}")


if __name__ == "__main__":
    main()
