"""``make demo`` (``python -m attnflow.cli.demo``): explain a sentence with raw attention, rollout and flow on the default model.

Prints the model's prediction and the top tokens per method, and writes the paper-style figure
(one panel per method, rows = layers, columns = tokens, the CLS row's scores) to ``out/demo.png``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console

from attnflow.api import explain
from attnflow.api.models import default_model_path, load_model, quiet_transformers
from attnflow.views.table import method_table

SENTENCES = ("The key to the cabinets", "The author that the critics praise")


def main(out_dir: str = "out") -> int:
    quiet_transformers()
    console = Console()
    path = default_model_path()
    console.print(f"model: {path}")
    model, tokenizer = load_model(path)
    Path(out_dir).mkdir(exist_ok=True)
    for i, sentence in enumerate(SENTENCES):
        result = explain(sentence, model, tokenizer=tokenizer, method="all", target="cls")
        console.rule(sentence)
        if result.prediction is not None:
            console.print(f"prediction: [bold]{result.prediction}[/bold]")
        console.print(method_table(result, k=5))
        png = os.path.join(out_dir, f"demo-{i + 1}.png")
        result.plot(png, title=f"{sentence}  (CLS row, per layer)")
        console.print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
