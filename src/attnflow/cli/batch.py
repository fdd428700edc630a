"""``attnflow batch``: explain a whole data set into a Parquet folder, on Dask or in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnflow.cli.app import app
from attnflow.cli.options import HeadFusion, Weighting, method_help, option


@app.command()
def batch(
    input: Path = typer.Argument(..., help="A .jsonl, .csv or .parquet file with a 'text' column (optional 'id', 'label')."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created; rerun with the same folder to finish an interrupted run)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model folder or hub id (every worker loads it "
                                        "once). Default: the bundled agreement model."),
    methods: str = typer.Option("rollout", help="Comma-separated: " + method_help("text")),
    target: Optional[str] = option("target"),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Column holding the texts (default 'text'; with --images, 'image')."),
    id_column: Optional[str] = typer.Option(None, "--id-column", help="Column of unique ids (default 'id' when present, else the row number)."),
    label_column: Optional[str] = typer.Option(None, "--label-column", help="Column copied into each row (default 'label' when present)."),
    images: bool = typer.Option(False, "--images", help="The column holds image paths (relative to the input file's folder), explained with explain-image."),
    maps: bool = typer.Option(False, "--maps", help="Also keep every target's scores in OUT/maps/ (flow: one max-flow per target; slow on long texts)."),
    truncate: bool = typer.Option(False, help="Cut texts longer than the model's maximum instead of listing them as failed."),
    residual: float = option("residual"),
    head_fusion: HeadFusion = option("head_fusion"),
    weighting: Weighting = option("weighting"),
    engine: str = typer.Option("auto", help="auto (with --scheduler: that cluster; else this process while that is quicker than starting a local Dask cluster, which then takes over), dask (a local cluster at once), or local (this process, no Dask)."),
    scheduler: Optional[str] = typer.Option(None, help="A running Dask scheduler: tcp://HOST:PORT or a scheduler file. Default: start a local cluster."),
    workers: Optional[int] = typer.Option(None, help="Worker processes of the local cluster (default: one per core)."),
    shard_size: int = typer.Option(64, "--shard-size", help="Rows per shard: the unit of work and of writing (an interruption loses at most the shards in flight)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Texts per forward pass (grouped by length)."),
    device: str = typer.Option("auto", help="auto (a GPU where a worker has one), cpu or cuda."),
) -> None:
    """Explain every row of INPUT and write one Parquet row per input and method to OUT/rows/
    (schema: docs/batch.md); failed rows go to OUT/errors.jsonl with the reason.

    Examples:

        attnflow batch data.jsonl --methods rollout,flow --target cls --out out/run

        attnflow batch data.csv --scheduler tcp://10.0.0.5:8786 --out /shared/run
    """
    import sys

    from rich.console import Console

    from attnflow.batch.run import BatchInterrupted
    from attnflow.batch.run import batch as run_batch
    from attnflow.cli.progress import ProgressBar

    # transformers is quietened by attnflow.cli.main before it is imported; importing it here would cost
    # seconds before the checks of batch() (well under one) could refuse anything
    progress = ProgressBar("rows", 1, "rows", Console(file=sys.stderr))
    console = Console()
    try:
        run = run_batch(str(input), model, out=out, methods=methods, target=target, text_column=text_column,
                        id_column=id_column, label_column=label_column, images=images, maps=maps, truncate=truncate,
                        residual=residual, head_fusion=head_fusion.value, weighting=weighting.value, engine=engine, scheduler=scheduler,
                        workers=workers, shard_size=shard_size, batch_size=batch_size, device=device,
                        progress=progress)
    except BatchInterrupted as stop:
        progress.stop()
        print_interrupted(stop.run)
        raise SystemExit(130) from None  # not KeyboardInterrupt: the CLI's generic line would follow
    finally:
        progress.stop()
    console.print(run.summary(), soft_wrap=True, highlight=False)
    if run.failed:
        console.print(f"failed rows and why: {run.out / 'errors.jsonl'}", soft_wrap=True, highlight=False)
    console.print(f"wrote {run.out}", soft_wrap=True, highlight=False)


def print_interrupted(run) -> None:  # noqa: ANN001
    import sys

    print(f"attnflow: interrupted; {run.written + run.skipped} of {run.shards} shards are written in {str(run.out)!r} "
          "(rerun the same command to finish; finished shards are kept, no row is written twice)", file=sys.stderr)
