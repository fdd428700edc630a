"""``attnflow explain-image``: which patches of an image a vision transformer's prediction draws on."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from attnflow.cli.app import app
from attnflow.cli.options import Weighting, device_option, dtype_option, method_enum, method_option, option
from attnflow.cli.outputs import check_outputs, write_outputs
from attnflow.cli.progress import progress_bar
from attnflow.errors import AttnflowError

ImageMethod = method_enum("image")


@app.command("explain-image")
def explain_image(
    images: List[Path] = typer.Argument(..., help="One or more image files (any format PIL reads)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Image classifier folder or hub id. Default: the bundled digits ViT."),
    method: ImageMethod = method_option("image", "rollout"),
    target: Optional[str] = typer.Option(None, "--class", help="Class grad-rollout explains (index or label). Default: the predicted class."),
    residual: float = option("residual"),
    weighting: Weighting = option("weighting"),
    device: str = device_option(),
    dtype: str = dtype_option(),
    png_out: Optional[Path] = typer.Option(None, "--png", help="Write the overlays here (.png), one panel per image and method."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result as JSON (one image at a time)."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Write the self-contained HTML report (one image at a time)."),
) -> None:
    """Overlay each patch's relevance for the model's prediction on the image.

    The explained position is the CLS token (or the mean of the patches for mean-pooled models);
    the overlays show the top layer.

    Example:

        attnflow explain-image digit.png --method grad-rollout --png overlay.png
    """
    if png_out is None and json_out is None and html_out is None:
        raise AttnflowError("say what to write: --png OUT.png, --json OUT.json and/or --html OUT.html")
    if len(images) > 1 and (json_out is not None or html_out is not None):
        raise AttnflowError(f"--json and --html hold one image's result; got {len(images)} images (run once per image)")
    check_outputs(png_only=png_out, json=json_out, html=html_out)
    from attnflow.api.images import explain_image as explain
    from attnflow.views.image import save_overlays

    with progress_bar("attention flow", unit="rows") as bar:
        results = explain(list(images), model, method=method.value, target_class=target, residual=residual,
                          progress=bar, weighting=weighting.value, device=device,
                          dtype=dtype)
    console = Console()
    for path, result in zip(images, results):
        explained = result.params.get("explained_class")
        extra = f", explaining class {explained}" if explained is not None else ""
        r, c = divmod(int(result.grid_scores().argmax()), result.grid[1])
        console.print(f"{path}: prediction [bold]{result.prediction}[/bold]{extra}; top patch (row {r}, col {c})",
                      soft_wrap=True)
    # the figure: one row per image, the picture as given, then one overlay per method
    write_outputs(console, [(png_out, lambda path: save_overlays(results, path, columns=len(results[0].methods),
                                                                 inputs=True)),
                            (json_out, results[0].to_json), (html_out, results[0].to_html)])
