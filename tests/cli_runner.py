"""Run the attnflow command line in-process, as the console script does (errors included)."""

from __future__ import annotations

import sys
from pathlib import Path

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


def refused(monkeypatch, capsys, folder: Path, *args: str, message: str) -> str:
    """Run ``attnflow ARGS`` in ``folder`` and check the refusal: exit 2, one ``attnflow: error:`` line on
    stderr holding ``message``, no traceback, no file written (not even a temporary one)."""
    monkeypatch.chdir(folder)
    before = sorted(p.name for p in folder.iterdir())
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("attnflow: error: "), err
    assert message in err, err
    assert "Traceback" not in err
    assert sorted(p.name for p in folder.iterdir()) == before
    return err
