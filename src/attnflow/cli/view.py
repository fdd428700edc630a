"""``attnflow view``: turn a saved result (JSON or .npz) into the HTML report or a figure, no model needed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from attnflow.cli.app import app
from attnflow.cli.outputs import check_outputs
from attnflow.errors import AttnflowError


@app.command()
def view(
    result: Path = typer.Argument(..., help="A result file: what `attnflow explain/generate/explain-image --json` "
                                            "write (any attnflow version), or a result saved as .npz."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Write the self-contained interactive HTML report."),
    png_out: Optional[Path] = typer.Option(None, "--png", help="Write the result's figure (.png/.svg/.pdf; overlays "
                                                               "of image results are .png)."),
    target: Optional[str] = typer.Option(None, help="Target to show: a token position (text) or a generated "
                                                    "token's index or text (generation). Default: the saved one."),
    title: Optional[str] = typer.Option(None, help="Page or figure title (default: the input text)."),
) -> None:
    """Show a saved RESULT without running a model again. Example:

        attnflow explain "the keys to the cabinet" --method all --json r.json
        attnflow view r.json --html report.html --png panels.png
    """
    from attnflow.results import Attribution

    if html_out is None and png_out is None:
        raise AttnflowError("say what to write: --html OUT.html and/or --png OUT.png")
    check_outputs(html=html_out, png=png_out)
    loaded = Attribution.load(result)  # validated here, so a bad file never leaves an output behind
    if target is not None:
        index = loaded.target_index(int(target) if loaded.kind == "text" and target.lstrip("-").isdigit()
                                    else target)
        loaded = loaded.with_target(index)
    console = Console()
    if html_out is not None:
        loaded.to_html(html_out, title=title)
        console.print(f"wrote {html_out}")
    if png_out is not None:
        options = {} if loaded.kind == "image" else {"title": title}
        loaded.plot(png_out, **options)
        console.print(f"wrote {png_out}")
