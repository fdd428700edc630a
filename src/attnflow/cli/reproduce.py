"""``attnflow reproduce``: the paper's Tables 1 and 2 on the bundled agreement model, ours beside theirs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from attnflow.cli.app import app
from attnflow.cli.checks import check_agreement_model
from attnflow.cli.progress import progress_bar
from attnflow.errors import AttnflowError
from attnflow.results.files import check_writable


@app.command()
def reproduce(
    examples: int = typer.Option(2000, help="How many test examples to evaluate (the paper used 2000)."),
    model: Path | None = typer.Option(None, "--model", "-m",
                                         help="A model written by attnflow.models.train_agreement. Default: the bundled one."),
    out: Path = typer.Option(Path("out/reproduction"), help="Folder for reproduction.csv and reproduction.png."),
    solver: str = typer.Option("auto", help="Flow solver: auto (the fastest exact one), certified, engine, torch, scipy or networkx."),
    include_cls: bool = typer.Option(False, help="Rank the CLS token too (by default only the words are ranked)."),
) -> None:
    """Correlate raw attention, rollout and flow (CLS row, per layer) with blank-out and input-gradient
    importance on the subject-verb agreement test set, as in the paper's section 4. Example:

        attnflow reproduce --examples 200
    """
    import torch

    from attnflow.reproduction.output import tables, write_csv, write_plot
    from attnflow.reproduction.run import reproduce as run_reproduction

    if examples < 1:
        raise AttnflowError(f"--examples must be at least 1; got {examples}")
    check_agreement_model(model)
    try:  # before the run, so a bad --out fails in a second, not after minutes of work
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AttnflowError(f"--out must be a folder that can be created; {str(out)!r}: {exc.strerror}") from exc
    check_writable(out, f"cannot write into --out {str(out)!r}")
    # Matrices of at most 25 tokens: extra intra-op threads only spin (10x the CPU time on a busy box).
    torch.set_num_threads(1)
    with progress_bar("examples") as bar:
        summary = run_reproduction(model, examples, flow_solver=solver, include_cls=include_cls, progress=bar)
    console = Console()
    for table in tables(summary):
        console.print(table)
    write_csv(summary, out / "reproduction.csv")
    write_plot(summary, out / "reproduction.png")
    console.print(f"wrote {out / 'reproduction.csv'} and {out / 'reproduction.png'}")
