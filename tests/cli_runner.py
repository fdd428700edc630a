"""Run the attnflow command line in-process, as the console script does (errors included)."""

from __future__ import annotations

import sys

from attnflow.cli import main


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``attnflow ARGS...`` -> (exit status, stdout, stderr)."""
    capsys.readouterr()  # what came before (a model loaded in Python shows transformers' bars) is not the CLI's
    monkeypatch.setattr(sys, "argv", ["attnflow", *args])
    try:
        main(fast_exit=False)  # the test process must survive a simulated Ctrl-C
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err
