"""``attnflow evaluate-perturbation``: the patch perturbation test (Chefer et al. 2021) as a table,
a plot and a CSV."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from attnflow.cli.app import app
from attnflow.cli.outputs import check_outputs
from attnflow.cli.progress import new_progress


@app.command("evaluate-perturbation")
def evaluate_perturbation(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Image classifier folder. Default: the bundled digits ViT (on its test split)."),
    method: Optional[List[str]] = typer.Option(None, "--method", help="Repeat to choose methods. Default: raw, rollout, flow, grad-rollout, random."),
    limit: Optional[int] = typer.Option(None, min=1, help="Use only the first N test images."),
    seed: int = typer.Option(0, help="Seed of the random baseline and of tie-breaking."),
    fill: str = typer.Option("mean", help="Removed patches: 'mean' = 0 after normalisation (the dataset mean); 'black' = pixel 0 before normalisation (erased ink on digits)."),
    png_out: Optional[Path] = typer.Option(None, "--png", help="Write the accuracy curves (.png)."),
    csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write the curves as CSV."),
) -> None:
    """Remove patches from most to least relevant (positive) and least to most (negative) in 10%
    steps; print accuracy and the area under each curve (positive: lower is better; negative:
    higher is better). Removed patches are set to 0 after normalisation (the dataset mean)
    unless --fill black.

        attnflow evaluate-perturbation --png perturbation.png --csv perturbation.csv
    """
    from attnflow.api.perturbation import METHODS
    from attnflow.api.perturbation import evaluate_perturbation as run
    from attnflow.views.perturbation import curves_table, save_curves_csv, save_curves_plot

    methods = tuple(method) if method else METHODS
    check_outputs(png_only=png_out, csv=csv_out)
    bar = new_progress()
    tasks: dict[str, int] = {}

    def tick(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    with bar:
        curves = run(model, methods=methods, limit=limit, seed=seed, fill=fill, progress=tick)
    console = Console()
    console.print(curves_table(curves, fill))
    if png_out is not None:
        save_curves_plot(curves, str(png_out))
        console.print(f"wrote {png_out}")
    if csv_out is not None:
        save_curves_csv(curves, str(csv_out))
        console.print(f"wrote {csv_out}")
