"""The front door, round 5 (issue 45), as a user runs it: ``generate``'s checks on its real default
model, options that would be silently ignored refused before any work (one line, exit 2, nothing
written), raw exceptions turned into sentences, a method asked for that runs alone, and the messages
that left a user without the next step."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli

import attnflow
from attnflow.errors import AttnflowError
from attnflow.models import bundled_model_path
from tests.factory import saved, tiny_decoder

AGREEMENT = bundled_model_path("agreement")
KEYS = "The keys to the cabinet"


def refused(monkeypatch, capsys, folder: Path, *args: str, message: str) -> str:
    """``attnflow ARGS`` in ``folder``: exit 2, one ``attnflow: error:`` line holding ``message``, no file."""
    monkeypatch.chdir(folder)
    before = sorted(p.name for p in folder.iterdir())
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("attnflow: error: "), err
    assert message in err, err
    assert sorted(p.name for p in folder.iterdir()) == before
    return err


@pytest.fixture(scope="module")
def decoder_dir(minilm_path, tmp_path_factory):
    """A tiny random Llama saved as a folder (a decoder by name, loaded in a second)."""
    model, tokenizer = tiny_decoder(minilm_path)
    return saved(model, tokenizer, tmp_path_factory.mktemp("decoder"))


# --------------------------------------------------------------------------- 2. generate's default model


@pytest.mark.parametrize("args", [["--method", "ablated-flow"], ["--method", "occlusion", "--token", "-1"]])
def test_generate_without_a_model_checks_decoder_methods_against_smollm2(monkeypatch, capsys, tmp_path, smollm2_dir,
                                                                         args):
    js = tmp_path / "g.json"
    code, out, err = run_cli(monkeypatch, capsys, "generate", KEYS, "-n", "2", *args, "--json", str(js))
    assert code == 0, err
    result = attnflow.load(js)
    assert args[1] in result.methods and result.kind == "generation", result.methods


def test_every_command_names_its_default_model_in_its_help(monkeypatch, capsys):
    for command in ("explain", "generate", "faithfulness", "explain-image", "batch", "reproduce", "methods", "app"):
        code, out, _ = run_cli(monkeypatch, capsys, command, "--help")
        assert code == 0
        text = " ".join(out.split())
        at = text.index("--model")
        assert "default" in text[at:at + 600].lower(), (command, text[at:at + 600])
