"""``attnflow generate``: complete a prompt and show which prompt tokens each generated token draws on."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from attnflow.cli.app import app
from attnflow.cli.checks import read_text
from attnflow.cli.options import CausalNorm, Weighting, _choice_enum, device_option, dtype_option, model_option, option
from attnflow.cli.outputs import check_outputs, write_outputs
from attnflow.config.registry import decoder_default, generation_methods
from attnflow.errors import AttnflowError

GenerationMethod = _choice_enum("GenerationMethod", generation_methods())
TRACKED, *OFFERED = generation_methods()


@app.command()
def generate(
    prompt: str = typer.Argument(..., help="The prompt, quoted, or - to read it from standard input."),
    model: Optional[str] = model_option("A decoder ('smollm2', installed from PyPI) or an encoder-decoder (T5, BART, "
                                        "Marian, ...): a folder, a .gguf file or a hub id. Default: the installed "
                                        "SmolLM2."),
    max_new_tokens: int = typer.Option(20, "--max-new-tokens", "-n", help="How many tokens to generate at most."),
    token: Optional[str] = typer.Option(None, help="Generated token to plot: 0-based index (negative from the end) or its text. Default: the first."),
    top: int = typer.Option(3, min=1, help="How many prompt tokens to list per generated token."),
    content_only: bool = typer.Option(False, "--content-only", help="Leave punctuation and very common words out of the ranking."),
    sample: bool = typer.Option(False, help="Sample instead of greedy decoding."),
    seed: int = typer.Option(0, help="Random seed for --sample."),
    causal_norm: Optional[CausalNorm] = option("causal_norm"),
    weighting: Weighting = option("weighting"),
    device: str = device_option(),
    dtype: str = dtype_option(),
    method: Optional[list[GenerationMethod]] = typer.Option(
        None, help=f"How each generated token is explained: {TRACKED} (tracked while generating), or "
        f"{', '.join(OFFERED)} (computed beside it); repeat the option for several, the first is shown. Default: "
        f"{' beside '.join(decoder_default())} (the measured-faithful method; docs/decoders.md). --method {TRACKED}: "
        "the paper's alone."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the generation result as JSON."),
    png_out: Optional[Path] = typer.Option(None, "--png", help="Write the bar chart + heatmap of --token (.png/.svg/.pdf)."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Write the self-contained interactive HTML report."),
) -> None:
    """Complete PROMPT and print, for each generated token, the prompt tokens its attention
    rollout (mean over layers) lands on most, beside those ablated flow finds it uses (the drop of
    the token's logit when a prompt token's values are zeroed in every layer), with a note on rows
    that mostly reflect position. Rollout is tracked incrementally with the KV cache.
    With an encoder-decoder model PROMPT is the source, and each generated token gets the joint
    rollout over the source (top decoder layer).

        attnflow generate "The keys to the cabinet" --model smollm2 -n 5 --png out.png
    """
    if max_new_tokens < 1:
        raise AttnflowError(f"--max-new-tokens must be a positive integer; got {max_new_tokens}")
    prompt = read_text(prompt, "the prompt")
    # Refuse bad output paths before the (slow) generation, so nothing is half done.
    check_outputs(json=json_out, png=png_out, html=html_out)
    import torch

    from attnflow.api import generate as generate_text
    from attnflow.api.checks import check_methods, named_info
    from attnflow.api.models import resolve
    from attnflow.config.settings import Settings

    if method:  # a chosen method that cannot run on this model, refused from its config before it loads
        check_methods([m.value for m in method], Settings(weighting=weighting.value, causal_norm=causal_norm.value
                                                          if causal_norm else None),
                      named_info(model, task="generation"), what="generate")
    loaded = resolve(model, task="generation", device=device, dtype=dtype)
    lm, tokenizer = loaded.model, loaded.tokenizer
    torch.manual_seed(seed)
    from attnflow.cli.progress import progress_bar

    # none named: the decoder defaults that run on this model (attnflow.api.defaults.generation_methods)
    names = list(dict.fromkeys(m.value for m in method)) if method else None
    with progress_bar(", ".join(names or decoder_default()), unit="runs") as bar:
        result = generate_text(lm, tokenizer, prompt, max_new_tokens, do_sample=sample, method=names, progress=bar,
                               causal_norm=causal_norm.value if causal_norm else None, weighting=weighting.value)
    if token is not None:  # before any file is written; the files open on this token
        result = result.with_target(token)
    console = Console()
    line = Text(prompt, style="bold")
    line.append(("\n→ " if result.kind == "seq2seq" else "") + result.meta["completion"])
    console.print(line, soft_wrap=True, highlight=False)
    result.print(top, content_only=content_only)
    write_outputs(console, [(json_out, result.to_json),
                            (png_out, lambda path: result.plot(path, content_only=content_only)),
                            (html_out, result.to_html)])
