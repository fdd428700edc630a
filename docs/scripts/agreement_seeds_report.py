"""Tables and figures from the runs of docs/scripts/agreement_seeds.py.

    python docs/scripts/agreement_seeds_report.py --runs RUNS [--img docs/img]

Prints, per recipe (labels only, distilled), Tables 1 and 2 as the mean over seeds of each seed's
mean, ± the standard deviation over seeds (ddof 0), the paper's row beside each; then the issue's
goal per seed (rollout and flow vs blank-out: L3-L6 within ±0.05 of the paper, L1-L2 within
±0.10); then student and teacher accuracy. Writes the training curves and the correlation-vs-layer
plot as PNGs into --img.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from attnflow.models import bundled_model_path  # noqa: E402
from attnflow.reproduction.paper import PAPER, TABLES  # noqa: E402

RECIPES = ("labels", "distilled")
METHODS = ("raw", "rollout", "flow")


def load(runs: Path) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(runs.glob("*_seed*/reproduce.json")):
        run = json.loads(path.read_text())
        model = Path(run["model"])
        training = model / "training.json"
        run["training"] = json.loads(training.read_text()) if training.is_file() else {}
        out.setdefault(run["recipe"], {})[run["seed"]] = run
    return out


def means(run: dict, method: str, importance: str) -> np.ndarray:
    return np.asarray(run["summary"][f"{method}|{importance}"]["mean"])


def tables(runs: dict[str, dict[int, dict]]) -> str:
    lines = []
    for recipe in RECIPES:
        seeds = runs.get(recipe, {})
        if not seeds:
            continue
        n = sorted({r["examples"] for r in seeds.values()})
        lines.append(f"{recipe}: seeds {sorted(seeds)}, {'/'.join(map(str, n))} test examples each; "
                     "mean over seeds ± std over seeds")
        for importance, title in TABLES.items():
            lines.append(f"  {title}")
            lines.append("             " + "".join(f"{'L' + str(i + 1):>13}" for i in range(6)))
            for method in METHODS:
                per_seed = np.stack([means(r, method, importance) for r in seeds.values()])
                mean, spread = per_seed.mean(0), per_seed.std(0)
                lines.append(f"  {method:<10} " + "".join(f"{m:>8.2f}±{s:.2f}" for m, s in zip(mean, spread)))
                paper = PAPER[(method, importance)]
                lines.append("    paper    " + "".join(f"{m:>13.2f}" for m, _ in paper))
        lines.append("")
    return "\n".join(lines)


def goal(runs: dict[str, dict[int, dict]]) -> str:
    lines = ["goal per seed: rollout+flow vs blank-out, |ours - paper| <= 0.05 at L3-L6 (of 8), <= 0.10 at L1-L2 (of 4)"]
    for recipe in RECIPES:
        for seed, run in sorted(runs.get(recipe, {}).items()):
            upper = lower = 0
            cells = []
            for method in ("rollout", "flow"):
                ours = means(run, method, "blank_out")
                paper = np.asarray([m for m, _ in PAPER[(method, "blank_out")]])
                diff = ours - paper
                upper += int((np.abs(diff[2:]) <= 0.05).sum())
                lower += int((np.abs(diff[:2]) <= 0.10).sum())
                cells.append(f"{method} " + " ".join(f"{d:+.3f}" for d in diff))
            lines.append(f"  {recipe:<9} seed {seed}: L3-L6 {upper}/8, L1-L2 {lower}/4   ({'; '.join(cells)})")
    return "\n".join(lines)


def accuracy(runs: dict[str, dict[int, dict]]) -> str:
    lines = ["accuracy (student; teacher): validation, test, unseen, unseen with 3 attractors, train CPU s"]
    for recipe in RECIPES:
        for seed, run in sorted(runs.get(recipe, {}).items()):
            t = run["training"]
            if not t:
                continue
            row = [t["validation_by_epoch"][-1], t["test"]["overall"], t["unseen"]["overall"],
                   t["unseen"].get("attractors=3", float("nan"))]
            text = f"  {recipe:<9} seed {seed}: student " + " ".join(f"{v:.4f}" for v in row)
            if "teacher" in t:
                te = t["teacher"]
                trow = [te["validation"]["overall"], te["test"]["overall"], te["unseen"]["overall"],
                        te["unseen"].get("attractors=3", float("nan"))]
                text += "; teacher " + " ".join(f"{v:.4f}" for v in trow)
            text += f"; {t.get('train_cpu_seconds', t.get('train_seconds'))} s"
            lines.append(text)
    return "\n".join(lines)


def plots(runs: dict[str, dict[int, dict]], img: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    layers = np.arange(1, 7)
    colours = {"raw": "tab:gray", "rollout": "tab:blue", "flow": "tab:orange"}
    for ax, (importance, title) in zip(axes, TABLES.items()):
        for method in METHODS:
            ax.plot(layers, [m for m, _ in PAPER[(method, importance)]], "--", color=colours[method], alpha=0.6)
            for recipe, style in (("labels", ":"), ("distilled", "-")):
                seeds = runs.get(recipe, {})
                if not seeds:
                    continue
                per_seed = np.stack([means(r, method, importance) for r in seeds.values()])
                ax.errorbar(layers, per_seed.mean(0), yerr=per_seed.std(0), fmt=style, marker="o", ms=3,
                            color=colours[method], label=f"{method}, {recipe} ({len(seeds)} seeds)")
        ax.set_title(f"{title} (dashed: the paper)")
        ax.set_xlabel("layer")
        ax.axhline(0, color="k", lw=0.5)
    axes[0].set_ylabel("Spearman, mean over seeds ± std over seeds")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(img / "reproduction_agreement_distilled.png", dpi=110)
    plt.close(fig)

    trained = [(recipe, seed, run["training"]) for recipe in RECIPES
               for seed, run in sorted(runs.get(recipe, {}).items()) if run["training"].get("curve")]
    if not trained:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for recipe, seed, t in trained:
        steps = [p["step"] for p in t["curve"]]
        style = "-" if recipe == "distilled" else ":"
        axes[0].plot(steps, [p["student_validation"] for p in t["curve"]], style, label=f"student, {recipe}, seed {seed}")
        axes[1].plot(steps, [p["student_loss"] for p in t["curve"]], style, label=f"student, {recipe}, seed {seed}")
        if recipe == "distilled":
            axes[0].plot(steps, [p["teacher_validation"] for p in t["curve"]], "-.", label=f"LSTM teacher, seed {seed}")
            axes[1].plot(steps, [p["teacher_loss"] for p in t["curve"]], "-.", label=f"LSTM teacher, seed {seed}")
    axes[0].set_title("validation accuracy (first 500 validation examples)")
    axes[1].set_title("training loss (mean over the last 125 steps)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step (batch of 64)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(img / "agreement_training_curves.png", dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--img", type=Path, default=Path(__file__).resolve().parents[1] / "img")
    args = parser.parse_args()
    runs = load(args.runs)
    if "labels" in runs and 0 in runs["labels"] and not runs["labels"][0]["training"]:
        runs["labels"][0]["training"] = json.loads((bundled_model_path("agreement") / "training.json").read_text())
    print(tables(runs))
    print(goal(runs))
    print(accuracy(runs))
    plots(runs, args.img)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
