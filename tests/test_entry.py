"""The thin entry point: ``explain`` decides once what a call computes and makes each check once (the
methods named against the model's kind as soon as it is known, the options against what the call
computes once that is decided), refuses a keyword that is no setting, and ``explain_as_asked`` is a
deprecated alias of it."""

from __future__ import annotations

import pytest
import torch
from factory import saved, tiny_decoder

import attnflow
from attnflow.api import defaults as honest
from attnflow.api import text as api_text
from attnflow.errors import AttnflowError

torch.set_num_threads(1)
TEXT = "the keys to the old cabinet"


@pytest.fixture(scope="module")
def decoder_dir(minilm_path, tmp_path_factory):
    return saved(*tiny_decoder(minilm_path), tmp_path_factory.mktemp("tiny-llama-entry"))


@pytest.fixture
def calls(monkeypatch):
    counts = {"text_methods": 0, "check_methods": 0, "check_computed": 0}
    real_methods, real_check, real_computed = honest.text_methods, api_text.check_methods, api_text.check_computed

    def text_methods(*a, **k):
        counts["text_methods"] += 1
        return real_methods(*a, **k)

    def check_methods(*a, **k):
        counts["check_methods"] += 1
        return real_check(*a, **k)

    def check_computed(*a, **k):
        counts["check_computed"] += 1
        return real_computed(*a, **k)

    monkeypatch.setattr(honest, "text_methods", text_methods)
    monkeypatch.setattr(api_text, "check_methods", check_methods)
    monkeypatch.setattr(api_text, "check_computed", check_computed)
    return counts


@pytest.mark.parametrize("how", ["path", "loaded", "bound"])
def test_the_defaults_are_decided_and_checked_once_per_call(decoder_dir, calls, how):
    model = {"path": decoder_dir, "loaded": None, "bound": attnflow.api.models.resolve(decoder_dir)}[how]
    if how == "loaded":
        bound = attnflow.api.models.resolve(decoder_dir)
        result = attnflow.explain(TEXT, bound.model, tokenizer=bound.tokenizer)
    else:
        result = attnflow.explain(TEXT, model)
    assert list(result.methods) == ["rollout", "ablated-flow"] and result.meta["added"]["methods"] == ["ablated-flow"]
    assert calls == {"text_methods": 1, "check_methods": 1, "check_computed": 1}


def test_settings_come_as_keywords_on_top_of_settings_and_a_stranger_is_refused(decoder_dir):
    result = attnflow.explain(TEXT, decoder_dir, method="rollout", settings=attnflow.Settings(residual=0.3),
                              head_fusion="max")
    assert result.params["residual"] == 0.3 and result.params["head_fusion"] == "max"
    with pytest.raises(AttnflowError, match="'residul' is not a setting"):
        attnflow.explain(TEXT, decoder_dir, method="rollout", residul=0.3)


def test_explain_as_asked_is_a_deprecated_alias(decoder_dir):
    with pytest.warns(DeprecationWarning, match="explain_as_asked is deprecated"):
        result = api_text.explain_as_asked(TEXT, decoder_dir, method="rollout")
    assert list(result.methods) == ["rollout"]


def test_one_device_resolution_for_entry_points_and_batch_workers():
    import socket

    from attnflow.api import checks, devices

    assert devices.pick_device("cpu") == "cpu"
    with pytest.raises(AttnflowError, match=r"^device \(--device\) must be"):
        devices.pick_device("gpu")
    # a batch worker checks its own GPUs through the same function, and says which host refused
    with pytest.raises(AttnflowError, match=rf"^on {socket.gethostname()}: device \(--device\) must be"):
        devices.pick_device("gpu", host=True)
    with pytest.warns(DeprecationWarning, match="attnflow.api.devices.pick_device"):
        assert checks.pick_device is devices.pick_device


def test_renamed_modules_keep_their_old_names_for_one_release():
    import importlib
    import sys

    from attnflow.api import defaults
    from attnflow.interventions import costs

    for old, new, name, same in (("attnflow.api.honest", defaults, "text_methods", "text_methods"),
                                 ("attnflow.api.long_inputs", costs, "prepare", "fit_to_budget")):
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=old):
            module = importlib.import_module(old)
        assert getattr(module, name) is getattr(new, same)


MOVED = [("attnflow.capture.ablation", "attnflow.interventions.ablation"),
         ("attnflow.capture.load", "attnflow.hf.load"),
         ("attnflow.api.costs", "attnflow.interventions.costs"),
         ("attnflow.capture.segments", "attnflow.units.segments")]


@pytest.mark.parametrize("old, new", MOVED)
def test_moved_modules_keep_their_old_paths_for_one_release(old, new):
    """Issue 43's split of capture into hf, capture, interventions and units: an old path is the moved
    module itself (a monkeypatch through it is seen by the code), with a warning naming the new path."""
    import importlib
    import sys

    from attnflow.config.moved import MODULES

    assert MODULES[old] == new
    moved = importlib.import_module(new)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: use {new}$"):
        module = importlib.import_module(old)
    assert module is moved and module.__name__ == new and module.__spec__.name == new
    assert sys.modules[old] is moved and importlib.import_module(old) is moved  # no second warning needed


def test_every_moved_path_names_a_module_that_is_there_and_the_old_file_is_gone():
    import importlib.util
    from pathlib import Path

    from attnflow.config.moved import MODULES

    src = Path(__file__).resolve().parents[1] / "src"
    for old, new in MODULES.items():
        assert importlib.util.find_spec(new) is not None and importlib.util.find_spec(new).origin.startswith(str(src))
        assert not (src / (old.replace(".", "/") + ".py")).exists(), f"{old} is both a file and an alias"


def test_names_the_capture_package_exported_follow_their_module(monkeypatch):
    import importlib
    import sys

    from attnflow.hf import load

    package = importlib.import_module("attnflow.capture")  # attnflow.capture is also the function
    with pytest.warns(DeprecationWarning, match="attnflow.capture.load_model is deprecated: use attnflow.hf.load"):
        assert package.load_model is load.load_model
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        package.nothing  # noqa: B018
    monkeypatch.delitem(sys.modules, "attnflow.capture.ablation", raising=False)  # as if not imported yet
    monkeypatch.delattr(package, "ablation", raising=False)
    with pytest.warns(DeprecationWarning, match="attnflow.capture.ablation is deprecated"):
        from attnflow.capture import ablation  # a moved module through the package, as `from` imports it
    import attnflow.interventions.ablation as moved
    assert ablation is moved
