"""``attnflow faithfulness``: how faithful raw attention, rollout and flow are to the model's own
prediction on one input (leave-one-out Spearman and AOPC, per method and layer)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from attnflow.cli.app import app
from attnflow.cli.checks import read_text
from attnflow.cli.explain import Method
from attnflow.cli.options import (
    CausalNorm,
    HeadFusion,
    Weighting,
    chosen_methods,
    device_option,
    dtype_option,
    method_option,
    model_option,
    option,
)
from attnflow.cli.outputs import check_outputs, write_outputs
from attnflow.cli.progress import progress_bar


@app.command()
def faithfulness(
    text: str = typer.Argument(..., help="The input text, quoted, or - to read it from standard input."),
    model: Optional[str] = model_option("A sequence classifier or a decoder: a folder, a .gguf file, a hub id, or "
                                        "'smollm2'. Default: the bundled agreement model. A bare encoder (no "
                                        "prediction head) is refused."),
    method: Method = method_option("text", "all"),
    residual: float = option("residual"),
    head_fusion: HeadFusion = option("head_fusion"),
    causal_norm: Optional[CausalNorm] = option("causal_norm"),
    weighting: Weighting = option("weighting"),
    device: str = device_option(),
    dtype: str = dtype_option(),
    truncate: bool = option("truncate"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result with its faithfulness numbers as JSON."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Write the HTML report (with the faithfulness table)."),
) -> None:
    """Measure, per method and layer, how well the scores match the model's own behaviour on TEXT:
    Spearman correlation with leave-one-out importance (the drop of the predicted class's logit, or
    of a decoder's predicted next token's, when one token is deleted), and ferret's AOPC
    comprehensiveness (delete the top 10/20/50 %: higher is better) and sufficiency (keep only them:
    lower is better); then, at the top layer, each method against position: a bootstrap interval of
    rho, the partial rho given position, rho with position, both position priors (later first,
    earlier first) and the method that agrees best on this input. See docs/faithfulness.md.

        attnflow faithfulness "The keys to the cabinet" --model smollm2 --html report.html
    """
    text = read_text(text)
    check_outputs(json=json_out, html=html_out)
    from attnflow.api import faithfulness as measure
    from attnflow.views.faithfulness import faithfulness_summary, faithfulness_table

    options = dict(residual=residual, head_fusion=head_fusion.value, truncate=truncate,
                   causal_norm=causal_norm.value if causal_norm else None, weighting=weighting.value, device=device,
                   dtype=dtype)
    chosen = chosen_methods(method)
    if method.value == "all":  # the command's default: on a decoder, its defaults beside the paper's three
        from attnflow.api.defaults import text_methods
        from attnflow.api.models import describe

        decoder = model is not None and describe(model)[1] == "causal-lm"
        chosen, _ = text_methods(chosen, decoder=decoder, explains_last=True, named=False)
    with progress_bar("leave-one-out and AOPC passes") as bar:
        result = measure(text, model, method=chosen, progress=bar, **options)
    console = Console()
    if result.prediction is not None:
        console.print(f"prediction: [bold]{result.prediction}[/bold]")
    console.print(faithfulness_table(result))
    summary = faithfulness_summary(result)
    if summary is not None:
        console.print(summary)
    write_outputs(console, [(json_out, result.to_json), (html_out, result.to_html)])
