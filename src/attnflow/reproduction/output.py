"""What `attnflow reproduce` prints and writes: the paper's tables (ours beside theirs), a CSV, a plot.

Files are written to a temporary name in the target directory and renamed into place, so an
interrupted run never leaves a half-written CSV or PNG behind.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from rich import box
from rich.table import Table

from attnflow.config import registry
from attnflow.reproduction.paper import PAPER, TABLES
from attnflow.reproduction.run import Reproduction
from attnflow.results.files import write_text
from attnflow.views.files import save_figure

METHOD_NAMES = {m: m.capitalize() for m in registry.paper_methods()}
GRADIENT_NAMES = {"sum": "|sum_d grad|", "norm": "||grad||_2"}


def describe(run: Reproduction) -> str:
    """One line naming what was measured: model folder, protocol, gradient score."""
    data = "" if run.data == "templates" else f", data {run.data}"
    return (f"model {Path(run.model).name}{data}, protocol {run.protocol}, gradient {GRADIENT_NAMES[run.gradient]}, "
            f"{run.examples} examples")


def residue_note(run: Reproduction) -> str | None:
    """A warning when Table 2's gradient score is rounding residue on this model (LayerNorm invariance)."""
    if not run.gradient_is_residue:
        return None
    return (f"note: sum_d of the gradient is rounding residue on this model (median |sum_d g| / ||g||_2 = "
            f"{run.gradient_residue:.1e}): LayerNorm ignores shifts along the all-ones vector, so Table 2 ranks "
            "float32 noise, as the paper's did; --gradient norm ranks by ||g||_2 (docs/reproduction.md)")


def tables(run: Reproduction) -> list[Table]:
    """Tables 1 and 2 in the paper's layout (methods x layers): each method's row (ours), then the paper's."""
    summary = run.summary
    out = []
    for importance, title in TABLES.items():
        n = int(max(summary[("raw", importance)]["n"]))
        # Compact (no box, short row labels) so that it fits 80 columns when piped to a file.
        table = Table(title=f"{title}\nSpearman, mean ± std over examples (ours: {n}, paper: 2000)",
                      box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)
        table.add_column("", no_wrap=True, min_width=8)
        for layer in range(1, 7):
            table.add_column(f"L{layer}", justify="right", no_wrap=True, min_width=10)
        for method, name in METHOD_NAMES.items():
            ours = summary[(method, importance)]
            table.add_row(name, *(f"{m:.2f}±{s:.2f}" for m, s in zip(ours["mean"], ours["std"])))
            table.add_row("  paper", *(f"{m:.2f}±{s:.2f}" for m, s in PAPER[(method, importance)]), style="dim",
                          end_section=method != list(METHOD_NAMES)[-1])
        out.append(table)
    return out


def write_csv(run: Reproduction, path: Path) -> None:
    """One row per (importance, method, layer): ours (mean, std, n), the paper's (mean, std), and
    the protocol and gradient score they were measured with."""
    summary = run.summary
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["importance", "method", "layer", "mean", "std", "n", "paper_mean", "paper_std", "protocol", "gradient"])
    for importance in TABLES:
        for method in METHOD_NAMES:
            ours = summary[(method, importance)]
            for layer in range(len(ours["mean"])):
                pm, ps = PAPER[(method, importance)][layer]
                w.writerow([importance, method, layer + 1, f"{ours['mean'][layer]:.4f}", f"{ours['std'][layer]:.4f}",
                            int(ours["n"][layer]), pm, ps, run.protocol, run.gradient])
    write_text(path, buf.getvalue())


def write_plot(run: Reproduction, path: Path) -> None:
    """Correlation vs layer, one panel per importance score, one colour per method, paper dashed."""
    summary = run.summary
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (importance, title) in zip(axes, TABLES.items()):
        for k, ((method, name), color) in enumerate(zip(METHOD_NAMES.items(), ("tab:gray", "tab:blue", "tab:red"))):
            ours = summary[(method, importance)]
            layers = [layer + 0.07 * (k - 1) for layer in range(1, len(ours["mean"]) + 1)]  # error bars side by side
            ax.errorbar(layers, ours["mean"], yerr=ours["std"], color=color, marker="o", capsize=3,
                        alpha=0.9, label=f"{name} (ours)")
            ax.plot(range(1, 7), [m for m, _ in PAPER[(method, importance)]], color=color, linestyle="--",
                    label=f"{name} (paper)")
        ax.set_title(title)
        ax.set_xlabel("layer")
        ax.axhline(0, color="black", linewidth=0.5)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Spearman's rho with importance (CLS row)")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(describe(run), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
