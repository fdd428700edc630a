"""``attnflow methods``: the method registry as a table, and with ``--model`` which methods that model can
run and why not the others (the facts ``attnflow.api.checks.check_methods`` refuses by)."""

from __future__ import annotations

from typing import Optional

import typer

from attnflow.cli.app import app


@app.command()
def methods(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="A model folder, alias or hub id: say which "
                                                                    "methods it can run, and why not the others. "
                                                                    "Default: none (every method is listed)."),
) -> None:
    """List the attribution methods: name, cost, whether scores have a layers axis, and the reference.

        attnflow methods

        attnflow methods --model smollm2
    """
    from attnflow.api.capture_plan import capture_path
    from attnflow.api.checks import kind_name, named_info, runnable
    from attnflow.config import registry

    kind = subject = None
    if model is not None:
        subject = named_info(model)
        kind = kind_name(subject)
        if kind is None:  # a hub id whose config is not here: its kind is known once loaded
            from attnflow.api.models import resolve

            subject = resolve(model)
            kind = kind_name(subject)
        article = "an" if kind[0] in "aeiou" else "a"
        print(f"{model} is {article} {kind} model")
    rows = [("method", "cost", "layers", "reference", *(["runs on it"] if kind else []))]
    for record, reason in runnable(subject, kind):
        rows.append((record.name, record.cost, "yes" if record.layers else "no", record.reference,
                     *([f"no: {reason}" if reason else "yes"] if kind else [])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    if kind == "decoder":
        print(f"\n{capture_path(subject)}")
    if kind is None:
        print(f"\n(cost classes, cheapest first: {'; '.join(registry.COSTS)}; "
              "`attnflow methods --model MODEL` says which a model can run)")
