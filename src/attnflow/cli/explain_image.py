"""``attnflow explain-image``: which patches of an image a vision transformer's prediction draws on."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from attnflow.cli import app
from attnflow.cli.outputs import check_outputs
from attnflow.cli.progress import progress_bar


@app.command("explain-image")
def explain_image(
    images: List[Path] = typer.Argument(..., help="One or more image files (any format PIL reads)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Image classifier folder or hub id. Default: the bundled digits ViT."),
    # A plain string checked by the library, so an unknown method is a one-line error like any other.
    method: str = typer.Option("rollout", help="raw | rollout | flow | grad-rollout (gradient-weighted rollout)."),
    target: Optional[str] = typer.Option(None, "--class", help="Class grad-rollout explains (index or label). Default: the predicted class."),
    residual: float = typer.Option(0.5, help="Weight of the residual connection for rollout and flow: A = (1-r)W + rI."),
    png_out: Path = typer.Option(..., "--png", help="Write the overlays here (.png), one panel per image."),
) -> None:
    """Overlay each patch's relevance for the model's prediction on the image.

    The explained position is the CLS token (or the mean of the patches for mean-pooled models) at
    the top layer. Example:

        attnflow explain-image digit.png --method grad-rollout --png overlay.png
    """
    from attnflow.explain_image import check_method, explain_image as explain
    from attnflow.views.image import save_overlays

    check_method(method)
    check_outputs(png_only=png_out)
    with progress_bar("attention flow") as bar:
        result = explain([str(p) for p in images], model, method=method, target=target, residual=residual,
                         progress=bar)
    console = Console()
    for path, expl in zip(images, result):
        extra = f", explaining class {expl.target}" if expl.target is not None else ""
        r, c = divmod(int(expl.scores.argmax()), expl.scores.shape[1])
        console.print(f"{path}: prediction [bold]{expl.prediction}[/bold]{extra}; top patch (row {r}, col {c})",
                      soft_wrap=True)
    save_overlays(result, str(png_out))
    console.print(f"wrote {png_out}")
