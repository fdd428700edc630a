"""Train and evaluate the agreement models on several seeds: labels only vs online distillation.

    nice -n 10 python docs/scripts/agreement_seeds.py --out RUNS [--examples 1000] [--seeds 0 1 2]

For each (recipe, seed), in the order of the list below (the most informative first, so a run cut
short still has them): train the model with one torch thread unless RUNS/<recipe>_seed<S> holds it
already (the labels-only seed 0 is the bundled ``agreement`` model, trained by the same command),
then run Tables 1 and 2 (the paper's protocol) on the first ``--examples`` test examples of its
seed and write RUNS/<recipe>_seed<S>/reproduce.json. CPU seconds (this process) and wall seconds are
printed with the load average for every step. ``docs/scripts/agreement_seeds_report.py`` turns
the JSON files into the tables and figures of docs/reproduction.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from attnflow.hf.load import quiet_transformers  # noqa: E402
from attnflow.models import bundled_model_path  # noqa: E402
from attnflow.reproduction.run import reproduce  # noqa: E402
from attnflow.reproduction.training.agreement import train  # noqa: E402


def stamp(what: str, cpu0: float, wall0: float) -> dict:
    row = {"step": what, "cpu_s": round(time.process_time() - cpu0, 1), "wall_s": round(time.time() - wall0, 1),
           "load": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--recipes", nargs="+", default=["distilled", "labels"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    quiet_transformers()
    args.out.mkdir(parents=True, exist_ok=True)
    print("load average at start", os.getloadavg(), flush=True)
    for seed in args.seeds:
        for recipe in args.recipes:
            folder = args.out / f"{recipe}_seed{seed}"
            timings = []
            if recipe == "labels" and seed == 0:
                model = bundled_model_path("agreement")
            else:
                model = folder
                if not (folder / "config.json").is_file():
                    cpu0, wall0 = time.process_time(), time.time()
                    train(folder, seed=seed, distill=recipe == "distilled")
                    timings.append(stamp(f"train {recipe} seed {seed}", cpu0, wall0))
            folder.mkdir(parents=True, exist_ok=True)
            cpu0, wall0 = time.process_time(), time.time()
            run = reproduce(model=str(model), examples=args.examples)
            timings.append(stamp(f"reproduce {recipe} seed {seed} ({args.examples} examples)", cpu0, wall0))
            summary = {f"{m}|{imp}": {k: [float(x) for x in v] for k, v in cell.items()}
                       for (m, imp), cell in run.summary.items()}
            (folder / "reproduce.json").write_text(json.dumps(
                {"model": str(model), "recipe": recipe, "seed": seed, "examples": run.examples,
                 "summary": summary, "timings": timings}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
