"""The front door, round 5 (issue 45), as a user runs it: ``generate``'s checks on its real default
model, options that would be silently ignored refused before any work (one line, exit 2, nothing
written), raw exceptions turned into sentences, a method asked for that runs alone, and the messages
that left a user without the next step."""

from __future__ import annotations


import numpy as np
import pytest
from cli_runner import refused, run_cli

import attnflow
from attnflow.errors import AttnflowError
from attnflow.models import bundled_model_path
from tests.factory import saved, tiny_decoder

AGREEMENT = bundled_model_path("agreement")
KEYS = "The keys to the cabinet"


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


# --------------------------------------------------------------------------- 3. options silently ignored


@pytest.mark.parametrize("args, message", [
    (["--model", "minilm", "--by", "word"], "spans='word' (--by/--spans) changes none of the methods"),
    (["--model", "minilm", "--by", "sentence", "--html", "r.html"], "changes none of the methods"),
    (["--budget", "3"], "budget=3.0 (--budget) changes none of the methods this call computes (rollout)"),
])
def test_options_that_would_change_nothing_are_refused_on_an_encoder(monkeypatch, capsys, tmp_path, args, message):
    refused(monkeypatch, capsys, tmp_path, "explain", KEYS + " are", *args, "--json", "o.json", message=message)


def test_budget_beside_a_method_without_one_is_refused(monkeypatch, capsys, tmp_path, decoder_dir):
    refused(monkeypatch, capsys, tmp_path, "explain", KEYS, "--model", decoder_dir, "--method", "ablated-flow",
            "--budget", "3", "--json", "o.json", message="budget=3.0 (--budget) changes none")
    with pytest.raises(AttnflowError, match="budget=3.0 .* changes none"):
        attnflow.explain(KEYS, decoder_dir, method="occlusion", settings=attnflow.Settings(budget=3))


@pytest.fixture
def in_positions(monkeypatch):
    """Budgets priced in token positions (the capture pass 1, the estimate's forward and backward pass 1 each):
    the tiny decoders' one row of 30,522 logits outweighs their layers, so their real counts would plan nothing."""
    from attnflow.interventions.compute import Shapes
    from tests.test_budgeted import in_positions as positions

    monkeypatch.setattr(Shapes, "of", classmethod(lambda cls, model: positions(model)))


@pytest.mark.usefixtures("in_positions")
def test_a_budget_given_without_a_method_is_kept_by_the_budgeted_default(decoder_dir):
    result = attnflow.explain(KEYS, decoder_dir, settings=attnflow.Settings(budget=3))
    assert result.methods == ["rollout", "ablated-flow-budgeted"]
    assert result.meta["ablated-flow-budgeted"]["budget"] == 3.0


def test_spans_on_an_encoder_are_refused_in_python_too(minilm_path):
    with pytest.raises(AttnflowError, match="spans='word' .* changes none of the methods this call computes"):
        attnflow.explain(KEYS, minilm_path, spans="word")


@pytest.mark.parametrize("content, message", [
    (b"", "holds no passage (it is empty or blank)"),
    (b"\n   \n\n", "holds no passage (it is empty or blank)"),
    (b"\xff\xfe\x00k\x00e\x00y\x00\x80\x81", "is not a UTF-8 text file"),
])
def test_a_spans_file_that_names_no_passage_is_refused(monkeypatch, capsys, tmp_path, decoder_dir, content, message):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "spans.txt").write_bytes(content)
    refused(monkeypatch, capsys, out, "explain", KEYS, "--model", decoder_dir, "--by", "spans", "--spans",
            str(tmp_path / "spans.txt"), "--json", "o.json", message=message)


def test_a_folder_given_as_the_spans_file_is_named_a_folder(monkeypatch, capsys, tmp_path, decoder_dir):
    (tmp_path / "passages").mkdir()
    refused(monkeypatch, capsys, tmp_path, "explain", KEYS, "--model", decoder_dir, "--by", "spans", "--spans",
            "passages", "--json", "o.json", message="is a folder; spans (--spans) takes a text file")


@pytest.mark.parametrize("spans, message", [
    ([], r"spans=\[\] names no span"),
    ([(0.5, 3)], r"got \(0.5, 3\): a character range is two integers"),
    (42, "spans must be .*; got int"),
    ([(0, 8), "cabinet"], "passages mixed with ranges"),
    (["   ", ""], "blank"),
])
def test_python_spans_that_name_nothing_or_no_range_are_refused(decoder_dir, spans, message):
    with pytest.raises(AttnflowError, match=message):
        attnflow.explain(KEYS, decoder_dir, method="ablated-flow", spans=spans)


def test_overlapping_spans_are_called_overlapping(decoder_dir):
    with pytest.raises(AttnflowError, match="overlaps the span before it"):
        attnflow.explain(KEYS, decoder_dir, method="ablated-flow", spans=["keys to the", "the cabinet"])


# --------------------------------------------------------------------------- 5. a method asked for runs alone


@pytest.mark.parametrize("method", ["attnlrp", "ablated-flow-estimate", "raw"])
def test_a_method_named_runs_alone_and_paper_only_works_beside_it(monkeypatch, capsys, tmp_path, decoder_dir, method):
    assert attnflow.explain(KEYS, decoder_dir, method=method).methods == [method]
    js = tmp_path / "e.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", KEYS, "--model", decoder_dir, "--method", method,
                             "--paper-only", "--json", str(js))
    assert code == 0, err
    result = attnflow.load(js)
    assert result.methods == [method] and "added" not in result.meta and "added:" not in out


def test_the_defaults_come_when_no_method_is_named_and_say_so(monkeypatch, capsys, tmp_path, decoder_dir):
    js = tmp_path / "e.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", KEYS, "--model", decoder_dir, "--json", str(js))
    assert code == 0, err
    result = attnflow.load(js)
    assert result.methods == ["rollout", "ablated-flow"]
    assert result.meta["added"]["methods"] == ["ablated-flow"] and "no method was named" in result.meta["added"]["why"]
    assert "added: ablated-flow (no method was named" in " ".join(out.split())
    code, out, err = run_cli(monkeypatch, capsys, "explain", KEYS, "--model", decoder_dir, "--paper-only", "--json",
                             str(js))
    assert code == 0 and attnflow.load(js).methods == ["rollout"], err


# --------------------------------------------------------------------------- 4. attnflow's own Loaded, bound once


def test_attnflows_own_loaded_model_is_taken_by_every_text_entry_point(decoder_dir):
    from attnflow.api.models import resolve

    bound = resolve(decoder_dir)
    again = attnflow.explain(KEYS, bound, method="ablated-flow")
    named = attnflow.explain(KEYS, decoder_dir, method="ablated-flow")
    assert again.methods == ["ablated-flow"]
    np.testing.assert_allclose(again.row("ablated-flow"), named.row("ablated-flow"), atol=1e-12)  # nan: no layers
    assert attnflow.explain_maps(KEYS, bound, methods=["rollout"]).methods == ["rollout"]
    assert attnflow.generate(bound, prompt=KEYS, max_new_tokens=1).kind == "generation"


def test_a_refusal_names_the_type_never_a_models_repr():
    import torch

    stack = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(30)])  # a repr of 30+ lines
    with pytest.raises(AttnflowError) as refusal:
        attnflow.explain(KEYS, stack, tokenizer=object())
    message = str(refusal.value)
    assert "\n" not in message and "Linear(" not in message and "got a Sequential" in message


# --------------------------------------------------------------------------- 6. the budget is the call's cost


LONG = ("Sara asked John to return her book. He said he would give it back to her after the weekend, "
        "and she thanked him for the")


@pytest.mark.parametrize("budget", [3, 5, 8])
@pytest.mark.usefixtures("in_positions")
def test_the_budget_counts_the_capture_pass_and_states_its_unit(monkeypatch, capsys, tmp_path, decoder_dir, budget):
    from attnflow.api.models import resolve
    from attnflow.interventions.budgeted import budgeted_ablated_flow
    from attnflow.interventions.compute import Shapes

    js = tmp_path / "b.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", LONG, "--model", decoder_dir, "--method",
                             "ablated-flow-budgeted", "--budget", str(budget), "--json", str(js))
    assert code == 0, err
    report = attnflow.load(js).meta["ablated-flow-budgeted"]
    assert report["budget"] == budget and report["cost"] <= budget
    assert report["unit"].startswith("forward passes of the input (the next token's: the last position's logits")
    # the chooser itself got what the capture pass left: the capture pass is the unit (every position, the last
    # one's logits), so the same plan, run alone, costs one pass less
    bound = resolve(decoder_dir)
    ids = bound.tokenizer(LONG)["input_ids"]
    shapes = Shapes.of(bound.model)
    capture = shapes.run(0, len(ids), logits=1) / shapes.forward(len(ids))
    assert capture == 1
    alone = budgeted_ablated_flow(bound.model, ids, budget=budget - capture)
    assert report["cost"] == pytest.approx(capture + alone.cost) and report["exact"] == [bool(e) for e in alone.exact]
    shown = " ".join(out.split())
    spent = f"ablated-flow-budgeted: spent {report['cost']:.1f} of a budget of {budget} forward passes of the input"
    assert spent in shown


def test_a_budget_below_what_the_call_spends_at_least_is_refused_in_one_line(monkeypatch, capsys, tmp_path,
                                                                             decoder_dir):
    """Attention priced too (one MAC per attended key per layer): the estimate's backward pass costs more than a
    forward pass (attention's gradients twice), so the capture pass and the estimate exceed 3."""
    from attnflow.hf.architectures import layer_windows
    from attnflow.interventions.compute import Shapes

    def shapes(cls, model):
        layers = len(layer_windows(model))
        return Shapes(linear=1.0, pair=(1.0,) * layers, windows=(None,) * layers, logits=0.0)

    monkeypatch.setattr(Shapes, "of", classmethod(shapes))
    err = refused(monkeypatch, capsys, tmp_path, "explain", LONG, "--model", decoder_dir, "--method",
                  "ablated-flow-budgeted", "--budget", "3", "--json", "o.json",
                  message="budget 3 is below what ablated-flow-budgeted spends here at least: about 3.")
    least = float(err.split("give --budget ")[1].split()[0])
    assert 3 < least < 4 and f"at least: about {least:g} forward passes" in err


def test_the_default_budget_rises_to_what_the_call_spends_at_least(monkeypatch, decoder_dir):
    """A long input's estimate alone can cost more than the default budget (SmolLM2 at 16,384 tokens: 5.1
    passes): the default rises to that least and says so in meta (budget, asked); a budget given is refused."""
    from attnflow.hf.architectures import layer_windows
    from attnflow.interventions.compute import Shapes

    def shapes(cls, model):  # a call's fixed price of 100 positions on a 29-token input: the estimate alone passes 5
        layers = len(layer_windows(model))
        return Shapes(linear=1.0, pair=(0.0,) * layers, windows=(None,) * layers, logits=0.0, call=100.0)

    monkeypatch.setattr(Shapes, "of", classmethod(shapes))
    result = attnflow.explain(LONG, decoder_dir, method="ablated-flow-budgeted")
    report = result.meta["ablated-flow-budgeted"]
    assert report["asked"] == 5.0 and report["budget"] > 5.0 and report["cost"] <= report["budget"] + 1e-9
    with pytest.raises(AttnflowError, match="budget 5.5 is below what ablated-flow-budgeted spends here at least"):
        attnflow.explain(LONG, decoder_dir, method="ablated-flow-budgeted", budget=5.5)


def test_budget_nan_says_what_a_budget_is(monkeypatch, capsys, tmp_path):
    refused(monkeypatch, capsys, tmp_path, "explain", KEYS, "--budget", "nan", "--json", "o.json",
            message="budget must be a number in [3, 100000]; got nan")


# --------------------------------------------------------------------------- 7. messages with the next step


def test_a_vision_model_given_a_text_method_points_to_explain_image(monkeypatch, capsys, tmp_path):
    refused(monkeypatch, capsys, tmp_path, "explain", KEYS, "--model", str(bundled_model_path("digits_vit")),
            "--method", "ablated-flow", "--json", "o.json",
            message="this model is an image classifier (a vision transformer); explain an image with "
                    "`attnflow explain-image IMAGE")


def test_the_unknown_word_hint_names_a_model_faithfulness_takes(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, "faithfulness", "My grandmother baked an apple pie for the picnic")
    warning = next(line for line in err.splitlines() if "not in the model's vocabulary" in line)
    assert "to measure faithfulness, which needs a prediction, a decoder: --model smollm2" in warning


def test_a_plain_dict_of_transformerlens_patterns_is_read_and_another_dict_is_told_what_works():
    import torch

    patterns = {f"blocks.{layer}.attn.hook_pattern": torch.rand(1, 2, 5, 5).softmax(-1) for layer in range(3)}
    result = attnflow.explain_attentions(patterns)
    stack = torch.stack([patterns[f"blocks.{layer}.attn.hook_pattern"][0] for layer in range(3)])
    np.testing.assert_allclose(result.row("rollout"), attnflow.explain_attentions(stack).row("rollout"))
    with pytest.raises(AttnflowError, match="pass the ActivationCache itself"):
        attnflow.explain_attentions({"pattern": stack})


def test_the_estimate_comes_before_the_capture_pass_and_names_the_budgeted_method(decoder_dir, monkeypatch):
    from attnflow.api import text as text_api
    from attnflow.interventions.costs import MethodEstimate

    from attnflow.capture import rows as rows_capture

    order = []
    real, real_rows = text_api.capture, rows_capture.capture_rows
    monkeypatch.setattr(text_api, "capture", lambda *a, **k: (order.append("capture"), real(*a, **k))[1])
    # a decoder's target alone takes the row capture (attnflow.capture.rows): the same pass, on SDPA
    monkeypatch.setattr(rows_capture, "capture_rows",
                        lambda *a, **k: (order.append("capture"), real_rows(*a, **k))[1])

    class Bar:
        def __call__(self, done, total):
            pass

        def estimate(self, found):
            order.append((found.method, found.instead))

    attnflow.explain(LONG, decoder_dir, method="ablated-flow", progress=Bar())
    assert order[:2] == [("ablated-flow", "ablated-flow-budgeted"), "capture"], order
    long = MethodEstimate(method="ablated-flow", tokens=4096, rows=4096, seconds=36000.0, memory=2**30, budget=2**33,
                          per_source=True, instead="ablated-flow-budgeted")
    assert "--method ablated-flow-budgeted answers within a stated budget" in str(long)


def test_progress_lines_name_the_method_that_runs(monkeypatch, capsys, tmp_path, decoder_dir):
    from attnflow.cli import progress

    monkeypatch.setattr(progress, "PLAIN_EVERY_SECONDS", 0.0)  # a line for every step (stderr is no terminal here)
    code, out, err = run_cli(monkeypatch, capsys, "explain", LONG, "--model", decoder_dir)
    assert code == 0, err
    lines = [line for line in err.splitlines() if " runs, ETA" in line or " rows, ETA" in line]
    assert lines and all(line.startswith("ablated-flow: ") for line in lines), lines


def test_an_unreachable_hub_id_names_the_installed_models(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    refused(monkeypatch, capsys, tmp_path, "explain", KEYS, "--model", "someone/a-model-not-here", "--json", "o.json",
            message="looks like a hub id, and the model hub cannot be reached from here")
    code, _, err = run_cli(monkeypatch, capsys, "explain", KEYS, "--model", "someone/a-model-not-here")
    assert "--model smollm2" in err and "--model minilm" in err, err


def test_a_methods_estimate_prints_once_and_its_bar_counts_its_own_time_only():
    import io

    from rich.console import Console

    from attnflow.interventions.costs import MethodEstimate
    from attnflow.cli.progress import ProgressBar

    stream = io.StringIO()
    bar = ProgressBar("explaining", 2, "runs", Console(file=stream, force_terminal=False))
    found = MethodEstimate(method="ablated-flow", tokens=400, rows=400, seconds=600.0, memory=2**20, budget=2**30,
                           per_source=True, instead="ablated-flow-budgeted")
    bar.estimate(found)  # before the capture pass: said, no bar yet (the capture is not this method's time)
    assert bar.task is None and stream.getvalue().count("ablated-flow on 400 tokens") == 1
    bar.method("rollout", "runs")
    bar(1, 3)
    bar.method("ablated-flow", "runs")  # the next method: a bar of its own, not rollout's elapsed time
    assert bar.task is None and bar.description == "ablated-flow"
    bar.estimate(found)  # the method's own estimate: not printed again; its bar starts now
    assert bar.task is not None and stream.getvalue().count("ablated-flow on 400 tokens") == 1
    bar.stop()


def test_a_setting_of_the_methods_asked_for_is_not_refused_for_a_default_added_beside_them(decoder_dir):
    result = attnflow.explain(KEYS, decoder_dir, weighting="norm")  # rollout reads it; ablated flow comes along
    assert result.methods == ["rollout", "ablated-flow"] and result.params["weighting"] == "norm"


def test_a_long_text_comes_from_standard_input(decoder_dir, tmp_path, monkeypatch, capsys):
    import io
    import sys

    from cli_runner import refused

    document = "The keys to the cabinet are on the table, and the door is open."
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(document.encode())))
    code, _, err = run_cli(monkeypatch, capsys, "explain", "-", "--model", decoder_dir, "--method", "rollout",
                           "--json", str(out))
    assert code == 0, err
    direct = attnflow.explain(document, decoder_dir, method="rollout")
    assert attnflow.Attribution.load(out).sources == direct.sources  # the whole document, not the word "-"
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe\x00binary")))
    refused(monkeypatch, capsys, empty, "explain", "-", "--model", decoder_dir, "--json", "o.json",
            message="standard input is not UTF-8 text")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"  \n")))
    refused(monkeypatch, capsys, empty, "generate", "-", "--model", decoder_dir, "--json", "o.json",
            message="the prompt must be a non-empty string")


def test_generate_without_a_model_refuses_more_tokens_than_smollm2_takes(tmp_path, monkeypatch, capsys):
    from cli_runner import refused

    refused(monkeypatch, capsys, tmp_path, "generate", "The keys to the cabinet", "-n", "10000", "--method",
            "ablated-flow", "--json", "o.json", message="exceeds the model's 8192")
