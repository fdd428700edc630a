"""The table of every command x every option (attnflow.cli.option_table, issue 45), walked: for each option
whose reach is checked, a value away from its default beside a method of that command that does not read it
is refused through the command line, in one line, exit 2, before any file is written; and each method the
table lists as reading it passes the same check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

from attnflow.api.checks import check_options, why_not
from attnflow.cli import option_table
from attnflow.config import registry
from attnflow.config.settings import rule
from attnflow.errors import AttnflowError
from attnflow.models import bundled_model_path
from tests.factory import saved, tiny_decoder

KEYS = "The keys to the cabinet are on the table"


@pytest.fixture(scope="module")
def inputs(minilm_path, tmp_path_factory):
    """What each command needs to start: a decoder folder, a data file, an image (the table and the check
    are generated; the inputs a command reads are not)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("inputs")
    decoder = saved(*tiny_decoder(minilm_path), folder / "decoder")
    (folder / "data.jsonl").write_text(json.dumps({"text": KEYS}) + "\n")
    Image.new("L", (8, 8), 128).save(folder / "digit.png")
    return {"decoder": str(decoder), "data": str(folder / "data.jsonl"), "image": str(folder / "digit.png")}


def _start(command: str, inputs: dict) -> tuple[list[str], str, str]:
    """(the command's arguments, the --method flag, the model's kind)."""
    text = ["--model", inputs["decoder"]]
    return {"explain": ([KEYS, *text, "--json", "o.json"], "--method", "decoder"),
            "faithfulness": ([KEYS, *text, "--json", "o.json"], "--method", "decoder"),
            "generate": ([KEYS, *text, "-n", "1", "--json", "o.json"], "--method", "decoder"),
            "batch": ([inputs["data"], "--out", "run", *text, "--engine", "local"], "--methods", "decoder"),
            "explain-image": ([inputs["image"], "--model", str(bundled_model_path("digits_vit")), "--png", "o.png"],
                              "--method", "vision")}[command]


def _away_from_default(option) -> tuple[list[str], object]:
    """A value of ``option`` other than its default, as command-line words and as the value."""
    if option.name == "spans":
        return ["--by", "word"], "word"
    if option.name == "target_class":  # any class of the digits model
        return ["--class", "3"], "3"
    if option.choices:
        value = next(c for c in option.choices if c is not None and c != option.default)
    else:
        low, high = option.bounds
        value = low if low != option.default else high
    return [option.spelled, str(value)], value


def _checked_rows():
    seen = set()
    for command, flag, name, where in option_table.rows():
        if name is not None and (command, name) not in seen:
            seen.add((command, name))
            yield command, flag, name, where


def test_the_table_lists_every_command_and_the_checked_options():
    table = option_table.markdown()
    for command in ("explain", "generate", "faithfulness", "batch", "explain-image", "view", "methods"):
        assert f"| `{command}` |" in table
    checked = {(c, n) for c, _, n, _ in _checked_rows()}
    assert {("explain", "budget"), ("explain", "spans"), ("explain", "weighting"), ("generate", "causal_norm"),
            ("batch", "residual"), ("explain-image", "residual")} <= checked


@pytest.mark.parametrize("command, flag, name, where", list(_checked_rows()))
def test_every_checked_option_is_refused_where_it_applies_nowhere(monkeypatch, capsys, tmp_path, inputs, command,
                                                                   flag, name, where):
    option = rule(name)
    args, method_flag, kind = _start(command, inputs)
    offered = option_table._offered(option_table._commands()[command])
    runs = [m for m in offered if why_not(registry.get(m), kind) is None and not registry.get(m).classifiers_only
            or kind == "vision" and m in offered]
    readers = [m for m in runs if name in registry.get(m).reads]
    others = [m for m in runs if name not in registry.get(m).reads]
    words, value = _away_from_default(option)
    for reader in readers:  # what the table says applies passes the one check
        check_options({name: value}, [reader], kind=kind)
        assert reader in where
    assert others, f"every method of {command} reads {name}: nothing to refuse"
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, command, *args, method_flag, others[0], *words)
    assert code == 2, (command, flag, others[0], out, err)
    assert err.count("\n") == 1 and err.startswith("attnflow: error: ") and name.split("_")[0] in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # refused before any file is written
    with pytest.raises(AttnflowError):
        check_options({name: value}, [others[0]], kind=kind)
