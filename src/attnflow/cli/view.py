"""``attnflow view``: turn a saved result (JSON or .npz) into the HTML report or a figure, no model needed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from attnflow.cli.app import app
from attnflow.cli.outputs import check_outputs, write_outputs
from attnflow.errors import AttnflowError


@app.command()
def view(
    result: Path = typer.Argument(..., help="A result file: what `attnflow explain/generate/explain-image --json` "
                                            "write (any attnflow version), a result saved as .npz, or the OUT "
                                            "folder of `attnflow batch` (with --id)."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Write the self-contained interactive HTML report."),
    png_out: Optional[Path] = typer.Option(None, "--png", help="Write the result's figure (.png/.svg/.pdf; overlays "
                                                               "of image results are .png)."),
    target: Optional[str] = typer.Option(None, help="Target to show: a token position (text) or a generated "
                                                    "token's index or text (generation). Default: the saved one."),
    title: Optional[str] = typer.Option(None, help="Page or figure title (default: the input text)."),
    id: Optional[str] = typer.Option(None, "--id", help="With a batch folder: the id of the input to show."),
) -> None:
    """Show a saved RESULT without running a model again.

    Example:

        attnflow explain "the keys to the cabinet" --method all --json r.json
        attnflow view r.json --html report.html --png panels.png
    """
    from attnflow.results import Attribution

    if html_out is None and png_out is None:
        raise AttnflowError("say what to write: --html OUT.html and/or --png OUT.png")
    check_outputs(html=html_out, png=png_out)
    loaded = _batch_row(result, id) if result.is_dir() or id is not None else Attribution.load(result)
    if target is not None:
        index = loaded.target_index(int(target) if loaded.kind == "text" and target.lstrip("-").isdigit()
                                    else target)
        loaded = loaded.with_target(index)
    console = Console()
    options = {} if loaded.kind == "image" else {"title": title}
    write_outputs(console, [(html_out, lambda path: loaded.to_html(path, title=title)),
                            (png_out, lambda path: loaded.plot(path, **options))])


def _batch_row(folder: Path, id: Optional[str]):
    """One input of a batch folder as its Attribution (images: the picture is read back from its path)."""
    from attnflow.results.rows import is_batch_folder, read_result

    if not is_batch_folder(folder):
        raise AttnflowError(f"{str(folder)!r} is not an attnflow batch folder (no batch.json); view takes a result "
                            "file or a batch folder")
    if id is None:
        raise AttnflowError(f"{str(folder)!r} is a batch folder: say which input to show with --id ID")
    loaded = read_result(folder, id)
    if loaded.kind == "image" and loaded.image is None:  # rows keep the path, not the pixels
        import numpy as np

        from attnflow.api.models import open_image

        picture = open_image(loaded.input)
        picture = picture.convert("L" if picture.mode in ("1", "L", "I", "F") else "RGB")
        loaded.image = np.asarray(picture, dtype=np.float32) / np.float32(255.0)
    return loaded
