"""``attnflow view``: turn a saved result (JSON) into the HTML report or a figure, no model needed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from attnflow.cli import app
from attnflow.cli.outputs import check_outputs
from attnflow.errors import AttnflowError
from attnflow.explanation import Explanation
from attnflow.explanation_maps import ExplanationMaps
from attnflow.views.heatmap import save_heatmaps
from attnflow.views.report import load_result, save_report


@app.command()
def view(
    result: Path = typer.Argument(..., help="A result JSON: what `attnflow explain --json` writes (one object or a "
                                            "list), ExplanationMaps.to_json(), or a generation result."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Write the self-contained interactive HTML report."),
    png_out: Optional[Path] = typer.Option(None, "--png", help="Write the layers x tokens heatmap (.png/.svg/.pdf); "
                                                               "not for generation results."),
    title: Optional[str] = typer.Option(None, help="Page or figure title (default: the input text)."),
) -> None:
    """Show a saved RESULT without running a model again. Example:

        attnflow explain "the keys to the cabinet" --method all --json r.json
        attnflow view r.json --html report.html
    """
    if html_out is None and png_out is None:
        raise AttnflowError("say what to write: --html OUT.html and/or --png OUT.png")
    check_outputs(html=html_out, png=png_out)
    loaded = load_result(result)  # validated here, so a bad file never leaves an output behind
    explanations = None
    if isinstance(loaded, Explanation):
        explanations = [loaded]
    elif isinstance(loaded, list):
        explanations = loaded
    elif isinstance(loaded, ExplanationMaps):
        explanations = [loaded.explanation(m) for m in loaded.methods if loaded.target in loaded.computed[m]]
    if png_out is not None and explanations is None:
        raise AttnflowError("--png draws explanations; a generation result has an HTML view only (--html)")
    console = Console()
    if html_out is not None:
        save_report(loaded, str(html_out), title=title)
        console.print(f"wrote {html_out}")
    if png_out is not None:
        # Several explanations of one method (one per target) would make ambiguous panels: one per method.
        first_per_method: dict[str, Explanation] = {}
        for e in explanations:
            first_per_method.setdefault(e.method, e)
        save_heatmaps(list(first_per_method.values()), str(png_out), title=title)
        console.print(f"wrote {png_out}")
