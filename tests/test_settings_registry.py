"""Settings (one frozen record, one check) and the method registry (one record per method): defaults
are the paper's, refusals say what was expected and what was given, ``settings=`` and keywords give the
same result, ``result.params`` is ``settings.as_dict()``, and a method registered at run time is picked
up by explain, explain_maps, the app's menus and the CLI's choices without another edit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from oracles import naive_rollout

import attnflow
from attnflow.config import registry
from attnflow.config.registry import FORWARD, FORWARD_BACKWARD, Context, Method
from attnflow.config.settings import OPTIONS, UNSET, Settings, choices
from attnflow.errors import AttnflowError

TEXT = "the keys to the cabinet"
DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_defaults_are_the_papers():
    s = Settings()
    assert (s.residual, s.head_fusion, s.weighting, s.causal_norm, s.target) == (0.5, "mean", "attention", None, None)
    assert s.as_dict() == {name: option.default for name, option in OPTIONS.items()}
    assert list(s.as_dict()) == [f.name for f in dataclasses.fields(Settings)] == list(OPTIONS)


@pytest.mark.parametrize("bad, message", [
    (dict(residual=1.5), "residual must be a number in [0, 1]; got 1.5"),
    (dict(residual="0.5"), "residual must be a number in [0, 1]; got '0.5'"),
    (dict(residual=True), "residual must be a number in [0, 1]; got True"),
    (dict(head_fusion="median"), "head_fusion must be 'mean', 'max' or 'min'; got 'median'"),
    (dict(head_fusion=None), "head_fusion must be 'mean', 'max' or 'min'; got None"),
    (dict(weighting="value"), "weighting must be 'attention' or 'norm'; got 'value'"),
    (dict(causal_norm="rows"), "causal_norm must be None, 'keys' or 'sink'; got 'rows'"),
    (dict(solver="fast"), "solver must be"),
    (dict(target="first"), "target must be 'cls', 'last' or a token position; got 'first'"),
    (dict(target=True), "target must be 'cls', 'last' or a token position; got True"),
    (dict(truncate="yes"), "truncate must be True or False; got 'yes'"),
])
def test_one_check_says_what_was_expected_and_given(bad, message):
    with pytest.raises(AttnflowError) as info:
        Settings(**bad)
    assert str(info.value).startswith(message)


def test_targets_are_normalised_once_and_settings_are_frozen():
    assert Settings(target="-2").target == -2 and Settings(target=np.int64(3)).target == 3
    assert Settings(target="cls").target == "cls" and isinstance(Settings(residual=1).residual, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().residual = 0.3  # type: ignore[misc]


def test_keywords_are_sugar_over_settings():
    base = Settings(residual=0.3, head_fusion="max")
    assert Settings.build(base) is base
    assert Settings.build(base, residual=UNSET, head_fusion="min") == Settings(residual=0.3, head_fusion="min")
    assert Settings.build(None, weighting="norm") == Settings(weighting="norm")
    with pytest.raises(AttnflowError, match="'fusion' is not a setting"):
        Settings.build(None, fusion="mean")
    with pytest.raises(AttnflowError, match="settings must be an attnflow.Settings; got dict"):
        Settings.build({"residual": 0.3})  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", ["explain_maps", "explain_attentions", "generate", "explain_image", "faithfulness"])
def test_signatures_show_each_settings_default_and_a_keyword_left_out_still_defers_to_settings(entry):
    """help() and inspect.signature show the setting's default (0.5, not a sentinel), while the keyword's
    real default stays UNSET: left out, ``settings=`` decides."""
    import inspect

    function = getattr(attnflow, entry)
    shown = inspect.signature(function).parameters
    taken = [name for name, value in function.__kwdefaults__.items() if value is UNSET]
    assert taken and all(shown[name].default == OPTIONS[name].default for name in taken), entry
    assert "UNSET" not in str(inspect.signature(function)) and "from settings" not in str(inspect.signature(function))


def test_a_setting_keyword_left_out_defers_to_settings_whatever_the_signature_shows():
    attentions = np.random.default_rng(0).dirichlet(np.ones(4), size=(2, 2, 4))
    left_out = attnflow.explain_attentions(attentions, settings=Settings(residual=0.3), methods="rollout")
    given = attnflow.explain_attentions(attentions, settings=Settings(residual=0.3), methods="rollout", residual=0.5)
    assert (left_out.params["residual"], given.params["residual"]) == (0.3, 0.5)


def test_a_keyword_defaulting_to_unset_must_be_a_setting():
    def entry(*, fusion: str = UNSET) -> None: ...

    with pytest.raises(AttnflowError, match="'fusion' defaults to UNSET but is no setting"):
        Settings.keywords(entry)


def test_the_solver_choices_are_the_cores_solvers():
    from attnflow.core.flow import SOLVERS

    assert set(choices("solver")) == set(SOLVERS)


def test_explain_with_settings_equals_keywords_and_the_naive_rollout():
    """Both spellings give the same scores and params == settings.as_dict(); the scores equal the naive
    rollout (tests/oracles.py) of the captured per-head maps under the same residual and fusion."""
    from attnflow.hf.load import cached_model

    settings = Settings(residual=0.3, head_fusion="max")
    by_settings = attnflow.explain(TEXT, method="all", settings=settings)
    by_keywords = attnflow.explain(TEXT, method="all", residual=0.3, head_fusion="max")
    overridden = attnflow.explain(TEXT, method="rollout", settings=settings, residual=0.5)
    assert by_settings.params == settings.as_dict() == by_keywords.params
    assert overridden.params["residual"] == 0.5 and overridden.params["head_fusion"] == "max"
    for m in ("raw", "rollout", "flow"):
        np.testing.assert_allclose(by_settings.row(m), by_keywords.row(m))
    model, tokenizer = cached_model(by_settings.model)
    maps = attnflow.capture(model, tokenizer, TEXT)
    expected = naive_rollout(maps.attentions.double().numpy(), residual=0.3, fusion="max")[:, by_settings.target]
    np.testing.assert_allclose(by_settings.row("rollout"), expected, atol=1e-6)
    assert not np.allclose(overridden.row("rollout"), by_settings.row("rollout"), atol=1e-3)


def test_the_registry_is_the_one_list_of_methods():
    names = [m.name for m in attnflow.methods()]
    assert names[:4] == ["raw", "rollout", "flow", "grad-rollout"]  # more may follow (one line each)
    assert registry.resolve("all") == (["raw", "rollout", "flow"], "rollout")
    assert "grad-rollout" not in registry.names("seq2seq")  # classifiers only
    assert {m.name: m.needs_model for m in attnflow.methods() if m.name in names[:4]} == {
        "raw": False, "rollout": False, "flow": False, "grad-rollout": True}
    assert attnflow.api.TEXT_METHODS == registry.names("text") and attnflow.api.IMAGE_METHODS == registry.names("image")
    with pytest.raises(AttnflowError, match="method must be one of raw, rollout, flow, grad-rollout.*; got saliency"):
        registry.resolve("saliency")
    with pytest.raises(AttnflowError, match="; got grad-rollout"):
        registry.resolve("grad-rollout", "seq2seq")
    with pytest.raises(AttnflowError, match="cost must be one of"):
        Method("x", ("text",), "cheap", True, "", "m:f")


def test_the_docs_table_is_the_registrys():
    assert registry.markdown_table() in (DOCS / "methods.md").read_text(encoding="utf-8")


def uniform(context: Context) -> np.ndarray:
    """A demonstration method: every source gets 1/n at every layer (oracle: obvious). It checks that a
    model-based method gets the model, the tokenizer and the ids the maps were captured from."""
    assert context.model is not None and context.tokenizer is not None and context.input_ids is not None
    assert context.settings.residual == 0.3
    n = context.attentions.attentions.shape[-1]
    layers = context.attentions.attentions.shape[0]
    return np.full((layers, len(context.rows), n), 1.0 / n)


def test_a_method_registered_at_run_time_is_picked_up_everywhere(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, "test-uniform", Method(
        "test-uniform", ("text",), FORWARD_BACKWARD, True, "a test", f"{__name__}:uniform"))
    result = attnflow.explain(TEXT, method=["test-uniform", "rollout"], residual=0.3)
    n = len(result.sources)
    np.testing.assert_allclose(result.row("test-uniform"), np.full((result.n_layers, n), 1.0 / n))
    maps = attnflow.explain_maps(TEXT, methods=["test-uniform"], residual=0.3)
    assert maps.methods == ["test-uniform"] and maps.scores["test-uniform"].shape[0] == n
    from attnflow.app.options import tables

    assert "test-uniform" in tables()["methods"]["text"] and "test-uniform" not in tables()["methods"]["image"]
    from attnflow.cli.options import method_enum

    assert "test-uniform" in [m.value for m in method_enum("text")]
    with pytest.raises(AttnflowError, match="; got test-uniform"):  # it needs a model: not from attention alone
        attnflow.explain_attentions(np.full((1, 1, 3, 3), 1 / 3), methods=["test-uniform"])
    with pytest.raises(AttnflowError, match="already registered"):
        registry.register(registry.REGISTRY["rollout"])
    assert FORWARD in registry.COSTS


def last_token_only(context: Context) -> np.ndarray:
    """A method without a layers axis: all of each row's weight on the last source."""
    n = context.attentions.attentions.shape[-1]
    out = np.zeros((1, len(context.rows), n))
    out[..., -1] = 1.0
    return out


def test_a_method_without_a_layers_axis_is_kept_at_the_top_layer(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, "test-last", Method(
        "test-last", ("text",), FORWARD, False, "a test", f"{__name__}:last_token_only"))
    attentions = np.random.default_rng(0).dirichlet(np.ones(4), size=(3, 1, 4))
    result = attnflow.explain_attentions(attentions, methods=["test-last", "rollout"], target=2)
    assert result.computed["test-last"].layers == (2,) and result.n_layers == 3
    np.testing.assert_allclose(result.layer_scores("test-last", layer=-1), [0, 0, 0, 1])
    assert np.isnan(result.row("test-last")[:2]).all()
    np.testing.assert_allclose(result.row("rollout"), naive_rollout(attentions)[:, 2])  # the others unchanged
