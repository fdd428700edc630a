"""The estimate and the budgeted chooser as registry methods: ``attnflow.explain(method=...)`` gives
what the interventions give, and through a generation each generated token's row equals one
teacher-forced computation on prompt + generated[:i] explaining the generated token."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import attnflow
from attnflow.interventions.ablation import ablated_flow
from attnflow.interventions.attribution_patching import attribution_patching
from attnflow.config.registry import Context, get
from attnflow.config.settings import Settings
from tests.oracles import float32_softmax_atol
from tests.factory import tiny_decoder, tiny_model

PROMPT = "the keys to the old cabinet"


@pytest.fixture(scope="module")
def decoder(minilm_path):
    return tiny_decoder(minilm_path)


def test_explain_with_the_estimate_and_the_budget(decoder, monkeypatch):
    from attnflow.interventions.compute import Shapes
    from tests.test_budgeted import in_positions

    monkeypatch.setattr(Shapes, "of", classmethod(lambda cls, model: in_positions(model)))  # a plan that mixes
    model, tokenizer = decoder
    text = "the keys to the old wooden cabinet near the door"
    ids = tokenizer(text)["input_ids"]
    result = attnflow.explain(text, model, tokenizer=tokenizer, method=["ablated-flow-estimate",
                                                                         "ablated-flow-estimate-layers"])
    L, n = result.n_layers, len(ids)
    est = attribution_patching(model, ids, layers="each").scores[0]
    np.testing.assert_allclose(result.scores["ablated-flow-estimate"][-1, L - 1], est.sum(0), atol=1e-10)
    np.testing.assert_allclose(result.scores["ablated-flow-estimate-layers"][-1], est, atol=1e-10)
    report: dict = {}
    context = Context(kind="text", attentions=None, settings=Settings(budget=4), rows=[n - 1], model=model,
                      input_ids=ids, notes=report)
    budgeted = get("ablated-flow-budgeted")(context)[0, 0]
    flags = np.array(report["ablated-flow-budgeted"]["exact"])
    plain = ablated_flow(model, ids)
    exact = plain.scores[0, 0]
    assert report["ablated-flow-budgeted"]["plan"] == "estimate+refine" and 0 < flags.sum() < n
    # a re-run's positions before its batch's start come from the clean cache (the model's eager attention,
    # softmax in float32), those after it from the shared-prefix kernel: batches that start elsewhere round
    # differently (oracles.float32_softmax_atol)
    np.testing.assert_allclose(budgeted[flags], exact[flags], atol=float32_softmax_atol(plain.clean[0], n))
    np.testing.assert_allclose(budgeted[~flags], est.sum(0)[~flags], atol=1e-10)
    # by span the top also takes spans by the target's attention (interventions.budgeted); by token it does not
    assert report["ablated-flow-budgeted"]["attended"] is False
    per_token = [[j] for j in range(n)]
    context = Context(kind="text", attentions=None, settings=Settings(budget=4), rows=[n - 1], model=model,
                      input_ids=ids, notes=report, spans=per_token)
    get("ablated-flow-budgeted")(context)
    assert report["ablated-flow-budgeted"]["attended"] is True
    # where the estimate alone takes the default budget (here: six rows), by span the default buys a pass of exact
    # re-runs beyond it; by token, and with a budget given, the budget is kept (raised to the least at most)
    from attnflow.interventions.budgeted import estimate_compute

    rows = list(range(n - 6, n))
    shapes = Shapes.of(model)
    least = estimate_compute(shapes, rows) / shapes.forward(n)
    assert least > 5
    for spans, budget, expected in ((None, 5.0, least), (per_token, 5.0, least + 1.0), (None, least + 0.5, least + 0.5),
                                    (per_token, least + 0.5, least + 0.5)):
        context = Context(kind="text", attentions=None, settings=Settings(budget=budget), rows=rows, model=model,
                          input_ids=ids, notes=report, spans=spans)
        get("ablated-flow-budgeted")(context)
        note = report["ablated-flow-budgeted"]
        assert note["budget"] == pytest.approx(expected) and note["cost"] <= expected + 1e-9
        assert (spans is None and budget == 5.0) or note["exact"].count(True) >= 1


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_through_a_generation_each_row_is_one_teacher_forced_computation(kind, minilm_path, monkeypatch):
    from attnflow.interventions.compute import Shapes
    from tests.test_budgeted import in_positions

    monkeypatch.setattr(Shapes, "of", classmethod(lambda cls, model: in_positions(model)))  # a plan that mixes
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    model = tiny_model(kind, vocab=tokenizer.vocab_size, dtype=torch.float64)
    methods = ["ablated-flow-estimate", "ablated-flow-budgeted"]
    result = attnflow.generate(model, tokenizer, PROMPT, 3, method=methods)
    m, k, L = result.input_length, result.n_targets, result.n_layers
    ids = result.meta["prompt_ids"] + result.meta["generated_ids"]
    mixed = 0
    for i in range(k):
        prefix, token = ids[: m + i], ids[m + i]
        est = attribution_patching(model, prefix, tokens=[token]).scores[0, 0]
        plain = ablated_flow(model, prefix, tokens=[token])
        exact = plain.scores[0, 0]
        atol = float32_softmax_atol(plain.clean[0], m + i)  # batches that start elsewhere (see above)
        np.testing.assert_allclose(result.scores["ablated-flow-estimate"][i, L - 1, : m + i], est, atol=1e-8)
        got = result.scores["ablated-flow-budgeted"][i, L - 1, : m + i]
        # per source either the exact score or the estimate, as the chooser decided
        assert np.all(np.minimum(np.abs(got - exact), np.abs(got - est)) < max(atol, 1e-8))
        mixed += int(np.any(np.abs(got - est) > 1e-6))
    assert mixed  # some sources were re-scored exactly


def test_spans_reach_the_methods_and_every_token_carries_its_span_score(decoder, tmp_path):
    from attnflow.units.spans import token_groups
    from attnflow.interventions.span_ablation import ablate_spans

    model, tokenizer = decoder
    text = "Sara asked John to return her book. He said he would give it back to"
    enc = tokenizer(text, return_offsets_mapping=True)
    ids, offsets, n = enc["input_ids"], enc["offset_mapping"], len(enc["input_ids"])
    groups = token_groups("sentence", text, offsets, n)
    assert len(groups) == 4  # [CLS], two sentences, [SEP]
    (tmp_path / "spans.txt").write_text("asked John\n\nwould give it\n", encoding="utf-8")
    passages = token_groups(str(tmp_path / "spans.txt"), text, offsets, n)
    assert passages == token_groups([(5, 15), (47, 60)], text, offsets, n)
    decoded = [tokenizer.decode([ids[i] for i in g]) for g in passages]
    assert "asked john" in decoded and "would give it" in decoded
    exact = ablate_spans(model, ids, groups).scores[0, 0]
    est = attribution_patching(model, ids).scores[0, 0]
    for name, expected in (("ablated-flow", exact), ("ablated-flow-estimate", [est[g].sum() for g in groups]),
                           ("ablated-flow-budgeted", exact)):  # 4 spans fit a budget of 10: exact
        # (one batch of 4 rows over ~20 positions plus a call's fixed price of 30 positions: above the default 5)
        context = Context(kind="text", attentions=None, settings=Settings(budget=10.0), rows=[n - 1], model=model,
                          input_ids=ids, spans=groups)
        got = get(name)(context)[0, 0]
        for s, g in enumerate(groups):
            np.testing.assert_allclose(got[g], expected[s], atol=1e-10)


class _Counted:
    """A progress callback with an ``estimate`` method, as the CLI's bar has: what it was told."""

    def __init__(self):
        self.calls, self.estimates = [], []

    def __call__(self, done, total):
        self.calls.append((done, total))

    def estimate(self, found):
        self.estimates.append(found)


@pytest.mark.parametrize("method", ["ablated-flow-estimate", "attnlrp"])
def test_through_a_generation_progress_counts_the_forward_then_a_backward_per_token(method, minilm_path):
    """One forward pass and one backward pass per generated token: the up-front estimate counts
    ``1 + k`` steps and ``1 + k`` passes' time (not a single backward pass), and the bar moves after
    each backward pass instead of jumping from 0 to the end."""
    from attnflow.interventions.costs import BACKWARD_PASSES

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    model = tiny_model("llama", vocab=tokenizer.vocab_size, dtype=torch.float32)
    prompt = " ".join(["the keys to the old cabinet are on the table"] * 3)  # >= 16 tokens: estimated
    k = 4
    counted = _Counted()
    attnflow.generate(model, tokenizer, prompt, k, method=[method], progress=counted)
    assert [c for c in counted.calls if c[1] == 1 + k] == [(i, 1 + k) for i in range(1, k + 2)], counted.calls
    (found,) = [e for e in counted.estimates if e.method == method]
    assert found.rows == 1 + k
    assert f"one forward pass and {k} backward passes" in str(found)
    assert found.seconds == pytest.approx((1 + (BACKWARD_PASSES - 1) * k) * found.pass_seconds)
