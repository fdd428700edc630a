"""A user's model is as it was after attnflow explained it: every registered method, through
``attnflow.explain``, on a tiny Llama, Gemma 2, GPT-2 and a BERT classifier (grad-rollout's kind), and
on a Llama, a GPT-2 and a BERT loaded on SDPA, which must stay on SDPA; also when the call is
interrupted (a progress callback that raises). A method a model cannot run must be refused, and
refused before it touches the model.

What is compared before and after: the weights (``state_dict``), every module's forward, pre-forward
and backward hooks, every module's instance attributes (``__dict__`` keys: no marker attribute) and own
``forward`` (none replaced), the config's attention implementation, and transformers' process-wide
attention and mask function registries (no entry left behind)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

import attnflow
from attnflow.api.checks import runnable
from attnflow.config.registry import REGISTRY
from attnflow.errors import AttnflowError
from attnflow.hf.points import installed_on
from tests.factory import tiny_model

TEXT = "the keys to the old cabinet are"
MODELS = ("llama", "llama-sdpa", "gemma2", "gpt2", "gpt2-sdpa", "bert", "bert-sdpa")  # bert: a classifier


class Stop(Exception):
    """Raised by the progress callback to interrupt a method mid-way."""


def snapshot(model) -> dict:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    modules = dict(model.named_modules())
    return {
        "hooks": {n: (list(m._forward_hooks.values()), list(m._forward_pre_hooks.values()),
                      list(m._backward_hooks.values())) for n, m in modules.items()},
        "attributes": {n: sorted(m.__dict__) for n, m in modules.items()},
        "forward": {n: m.__dict__.get("forward", type(m).forward) for n, m in modules.items()},
        "attention": model.config._attn_implementation,
        "registries": (sorted(AttentionInterface._global_mapping), sorted(AttentionMaskInterface._global_mapping)),
        "state": {k: v.clone() for k, v in model.state_dict().items()},
    }


def assert_unchanged(before: dict, after: dict) -> None:
    """Every difference at once, named by module: hooks, attributes, forwards, attention, registries, weights."""
    problems = []
    for key in ("hooks", "attributes", "forward"):
        changed = {n: (before[key][n], after[key].get(n)) for n in before[key] if before[key][n] != after[key].get(n)}
        if key == "attributes":
            changed = {n: sorted(set(a) ^ set(b)) for n, (b, a) in changed.items()}
        if changed:
            problems.append(f"{key} changed on {len(changed)} modules, e.g. {dict(list(changed.items())[:2])}")
    for key in ("attention", "registries"):
        if before[key] != after[key]:
            problems.append(f"{key}: {before[key]} -> {after[key]}")
    weights = [k for k in before["state"] if not torch.equal(before["state"][k], after["state"].get(k))]
    if weights or before["state"].keys() != after["state"].keys():
        problems.append(f"weights changed: {weights[:3]}")
    assert not problems, "the model is not as it was:\n" + "\n".join(problems)


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def build(name: str, vocab: int):
    """A fresh tiny model per test, so that what one method leaves behind is not blamed on the next."""
    kind, _, attention = name.partition("-")
    model = tiny_model(kind, vocab=vocab)
    if attention:
        model.set_attn_implementation(attention)
    return model


def _raise(done, total):
    raise Stop


@pytest.mark.parametrize("method", list(REGISTRY))
@pytest.mark.parametrize("name", MODELS)
def test_every_method_leaves_the_model_as_it_was(tokenizer, name, method):
    model = build(name, tokenizer.vocab_size)
    why = dict((m.name, reason) for m, reason in runnable(model))[method]
    own = model.config._attn_implementation
    before = snapshot(model)
    if why is not None:  # refused before anything touches the model
        with pytest.raises(AttnflowError):
            attnflow.explain(TEXT, model, tokenizer=tokenizer, method=method)
        assert_unchanged(before, snapshot(model))
        return
    result = attnflow.explain(TEXT, model, tokenizer=tokenizer, method=method)
    assert method in result.computed
    assert_unchanged(before, snapshot(model))
    assert model.config._attn_implementation == own and installed_on(model) == {}
    try:  # interrupted where the method reports progress (inside its pass); others run to the end
        attnflow.explain(TEXT, model, tokenizer=tokenizer, method=method, progress=_raise)
    except Stop:
        pass
    assert_unchanged(before, snapshot(model))
    assert installed_on(model) == {}


@pytest.mark.parametrize("name", ["llama-sdpa", "gpt2"])
def test_generation_leaves_the_model_as_it_was(tokenizer, name):
    model = build(name, tokenizer.vocab_size)
    before = snapshot(model)
    trace = attnflow.generate(model, tokenizer, TEXT, max_new_tokens=3)
    assert trace is not None
    assert_unchanged(before, snapshot(model))


def test_a_model_loaded_on_sdpa_gives_the_maps_of_its_eager_twin(tokenizer):
    """The eager switch is real for the call (weights returned) and the answer is the eager model's."""
    sdpa, eager = build("llama-sdpa", tokenizer.vocab_size), build("llama", tokenizer.vocab_size)
    got = attnflow.explain(TEXT, sdpa, tokenizer=tokenizer, method="rollout")
    want = attnflow.explain(TEXT, eager, tokenizer=tokenizer, method="rollout")
    torch.testing.assert_close(torch.as_tensor(got.row("rollout")), torch.as_tensor(want.row("rollout")))
    assert sdpa.config._attn_implementation == "sdpa"


def test_threads_sharing_a_model_each_get_their_own_pass(tokenizer, monkeypatch):
    """The app runs jobs on one model in parallel threads. While one thread's attribution patching holds its
    scope open (value leaves on every layer, attention switched to SDPA for a long input, layers
    checkpointed), another thread's rollout runs whole: it must get eager weights and no edit, i.e. the
    same numbers as alone, and the model must be as it was after both."""
    import threading

    from attnflow.interventions import attribution_patching as patching

    monkeypatch.setattr(patching, "CHECKPOINT_FROM", 4)  # the long-input path: SDPA and checkpointing
    model = build("llama-sdpa", tokenizer.vocab_size)
    alone = attnflow.explain(TEXT, model, tokenizer=tokenizer, method=["rollout", "ablated-flow-estimate"])
    before = snapshot(model)
    inside, other_done, got = threading.Event(), threading.Event(), {}

    def wait_inside(done, total):
        if done == 1:  # after the forward pass, inside the scope
            inside.set()
            assert other_done.wait(60)

    def first():
        got["estimate"] = attnflow.explain(TEXT, model, tokenizer=tokenizer, method="ablated-flow-estimate",
                                           progress=wait_inside)

    def second():
        assert inside.wait(60)
        got["rollout"] = attnflow.explain(TEXT, model, tokenizer=tokenizer, method="rollout")
        other_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert other_done.is_set() and set(got) == {"estimate", "rollout"}
    torch.testing.assert_close(torch.as_tensor(got["rollout"].row("rollout")),
                               torch.as_tensor(alone.row("rollout")), rtol=0, atol=0)
    torch.testing.assert_close(torch.as_tensor(got["estimate"].row("ablated-flow-estimate")),
                               torch.as_tensor(alone.row("ablated-flow-estimate")), equal_nan=True)
    assert_unchanged(before, snapshot(model))
