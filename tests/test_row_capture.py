"""The row capture (attnflow.capture.rows): a decoder's target rows on SDPA, without the maps, against the eager
capture; what explain does with it; that it forms no (heads, n, n) or (layers, n, n) tensor. Every architecture is
checked in test_architectures_matrix.py (test_row_capture_equals_the_eager_capture)."""

from __future__ import annotations

import copy
import glob
import os
import tempfile

import numpy as np
import pytest
import torch
from factory import tiny_decoder
from torch.utils._python_dispatch import TorchDispatchMode

import attnflow
import attnflow.api.text as api_text
from attnflow.api.capture_plan import row_capture
from attnflow.capture.rows import capture_rows
from attnflow.capture.text import encode
from attnflow.core.methods import method_rows
from attnflow.core.raw import raw_rows
from attnflow.core.rollout import rollout_rows
from attnflow.errors import AttnflowError
from attnflow.hf.points import installed_on

TEXT = ("The keys to the old cabinet are on the table near the door, and the letter that Sara wrote to John "
        "last winter is in the second drawer under the books")


@pytest.fixture(scope="module")
def decoder(minilm_path):
    model, tokenizer = tiny_decoder(minilm_path, layers=4)
    return model.float(), tokenizer


def _n(tokenizer, text=TEXT) -> int:
    return len(encode(tokenizer, [text])["input_ids"][0])


def _eager_rows(model, tokenizer, position, text=TEXT, **settings):
    maps = attnflow.capture(model, tokenizer, text, head_fusion=settings.get("head_fusion", "mean"))
    return (rollout_rows(maps, [position], **settings), raw_rows(maps, [position], head_fusion=settings.get(
        "head_fusion", "mean"), causal_norm=settings.get("causal_norm")), maps)


@pytest.mark.parametrize("settings", [dict(), dict(head_fusion="max", residual=0.3), dict(causal_norm="keys"),
                                      dict(causal_norm="sink", head_fusion="min")])
def test_rows_equal_the_eager_capture_with_every_setting_and_target(decoder, settings):
    model, tokenizer = decoder
    for position in (_n(tokenizer) - 1, 7):
        rollout, raw, _ = _eager_rows(model, tokenizer, position, **settings)
        got = capture_rows(model, tokenizer, TEXT, position, ["raw", "rollout"], memory=3_000, **settings)
        torch.testing.assert_close(got.rows.values["rollout"], rollout, atol=1e-5, rtol=0)
        # raw rows under "keys" are weights times the number of keys (up to n): float32 agreement is relative
        torch.testing.assert_close(got.rows.values["raw"], raw, atol=1e-5, rtol=1e-5)


def test_spilled_queries_and_keys_give_the_same_rows_and_leave_no_file(decoder, monkeypatch, tmp_path):
    model, tokenizer = decoder
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    n = _n(tokenizer)
    kept = capture_rows(model, tokenizer, TEXT, n - 1, ["raw", "rollout"])
    seen = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: seen.append(a[0]) or real_load(*a, **k))
    spilled = capture_rows(model, tokenizer, TEXT, n - 1, ["raw", "rollout"], keep_in_memory=0)
    assert len(seen) == 4 and all(str(p).startswith(str(tmp_path)) for p in seen)  # one file per layer, read once
    for method in ("raw", "rollout"):
        torch.testing.assert_close(spilled.rows.values[method], kept.rows.values[method], atol=0, rtol=0)
    assert not glob.glob(os.path.join(tmp_path, "*"))


class _Shapes(TorchDispatchMode):
    """The shape of every tensor any operation creates while active."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def _square_stacks(shapes, n):
    """Shapes holding more than one (n, n) square: two axes of length n and something else above 1."""
    return [s for s in shapes if sum(d == n for d in s) >= 2 and int(np.prod(s)) > n * n]


def test_no_heads_or_layers_square_is_formed(decoder):
    model, tokenizer = decoder
    n = _n(tokenizer)
    assert n not in (2, 4, 8, 16, 32, 64) and n > 20  # no other axis of the tiny model has this length
    with _Shapes() as rows_path:
        capture_rows(model, tokenizer, TEXT, n - 1, ["raw", "rollout"], memory=12_000)  # chunks of 10 queries
    with _Shapes() as eager_path:  # the check bites: the eager capture forms both
        attnflow.capture(model, tokenizer, TEXT, head_fusion="mean")
    assert len(rows_path.shapes) > 100 and not _square_stacks(rows_path.shapes, n)
    found = _square_stacks(eager_path.shapes, n)
    assert (1, 4, n, n) in found and (1, 4, 1, n, n) in found  # one layer's heads; the (layers, n, n) buffer


def test_explain_takes_the_row_path_equal_to_the_eager_one_and_leaves_sdpa(decoder, monkeypatch):
    model, tokenizer = decoder
    model.set_attn_implementation("sdpa")
    calls = []
    real = api_text.row_capture

    def spy(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(api_text, "row_capture", spy)
    asked = dict(tokenizer=tokenizer, method=["raw", "rollout"], paper_only=True)
    fast = attnflow.explain(TEXT, model, **asked)
    defaults = attnflow.explain(TEXT, model, tokenizer=tokenizer)  # rollout beside the decoder's ablated flow
    assert calls == [["raw", "rollout"], ["rollout"]]
    assert model.config._attn_implementation == "sdpa" and not installed_on(model)
    monkeypatch.setattr(api_text, "row_capture", lambda *a, **k: None)  # today's eager capture
    slow = attnflow.explain(TEXT, model, **asked)
    slow_defaults = attnflow.explain(TEXT, model, tokenizer=tokenizer)
    assert set(defaults.methods) == set(slow_defaults.methods) and len(defaults.methods) > 1
    monkeypatch.setattr(api_text, "row_capture", spy)
    alone = api_text.explain(TEXT, model, tokenizer=tokenizer, method=["ablated-flow"], paper_only=True)
    assert calls[-1] == []  # the pass alone: no rows, no maps
    for a, b in ((fast, slow), (defaults, slow_defaults), (alone, slow_defaults.select(["ablated-flow"]))):
        for method in a.methods:
            np.testing.assert_allclose(a.block(method).values, b.block(method).values, atol=1e-5, rtol=0)


def test_flow_the_norm_weighting_and_explain_maps_keep_the_maps(decoder, monkeypatch):
    model, tokenizer = decoder
    settings = attnflow.Settings()
    assert row_capture(["rollout", "ablated-flow"], model, settings) == ["rollout"]
    assert row_capture(["ablated-flow"], model, settings) == []  # the pass alone: no queries or keys kept
    assert row_capture(["rollout", "flow"], model, settings) is None  # flow reads the maps
    assert row_capture(["rollout"], model, settings.replace(weighting="norm")) is None
    calls = []
    real = api_text.row_capture
    monkeypatch.setattr(api_text, "row_capture", lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])
    text = "the keys to the cabinet are here"
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=["raw", "rollout"], paper_only=True)
    assert calls == []  # every target's maps: not asked
    assert len(maps.block("rollout").targets) == _n(tokenizer, text)


def test_captured_rows_refuse_what_they_do_not_hold(decoder):
    model, tokenizer = decoder
    n = _n(tokenizer)
    maps = capture_rows(model, tokenizer, TEXT, n - 1, ["rollout"])
    with pytest.raises(AttnflowError, match="only the rows of rollout at positions"):
        method_rows(maps, "rollout", [3])
    with pytest.raises(AttnflowError, match="with .*residual"):
        method_rows(maps, "rollout", [n - 1], residual=0.2)
    with pytest.raises(AttnflowError, match="got flow"):
        method_rows(maps, "flow", [n - 1])
    with pytest.raises(AttnflowError, match="outside the input"):
        capture_rows(model, tokenizer, TEXT, n, ["rollout"])


def test_smollm2_rows_at_512_tokens_equal_the_eager_capture(smollm2):
    model, tokenizer = smollm2
    text = " ".join(["Sara asked John to return her book, and he said he would give it back to her soon."] * 25)
    n = _n(tokenizer, text)
    assert 480 <= n <= 560
    rollout, raw, maps = _eager_rows(model, tokenizer, n - 1, text)
    got = capture_rows(model, tokenizer, text, n - 1, ["raw", "rollout"])
    torch.testing.assert_close(got.rows.values["rollout"], rollout, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.rows.values["raw"], raw, atol=1e-5, rtol=0)
    assert got.last_logits is None and maps.last_logits is not None  # eager model: no clean readout from SDPA
    assert model.config._attn_implementation == "eager"


def test_smollm2_in_bfloat16_gives_the_float32_rows_to_a_stated_tolerance(smollm2):
    """Measured at 201 tokens: rollout rows within 1.3e-3 (L1 distance per row 4.4e-3), raw rows within 1.2e-2
    (3.3 % of a row's largest weight), Spearman of the top layer's rows > 0.9996."""
    model, tokenizer = smollm2
    text = " ".join(["Sara asked John to return her book, and he said he would give it back to her soon."] * 10)
    n = _n(tokenizer, text)
    full = capture_rows(model, tokenizer, text, n - 1, ["raw", "rollout"])
    low = capture_rows(copy.deepcopy(model).to(torch.bfloat16), tokenizer, text, n - 1, ["raw", "rollout"])
    for method, l1 in (("raw", 0.1), ("rollout", 0.01)):
        ours, reference = low.rows.values[method], full.rows.values[method]
        assert ours.dtype == torch.float32 and 0 < float((ours - reference).abs().max())
        torch.testing.assert_close(ours.sum(-1), reference.sum(-1), atol=1e-5, rtol=0)  # accumulated in float32
        assert float((ours - reference).abs().sum(-1).max()) < l1
        top = np.argsort(-reference[-1, 0].numpy())[:10]
        assert set(top) == set(np.argsort(-ours[-1, 0].numpy())[:10])


def test_a_mask_other_than_the_causal_window_rule_is_refused():
    from attnflow.capture.rows import _check_mask

    n = 6
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    causal, windowed = (j <= i)[None, None], ((j <= i) & (j > i - 3))[None, None]
    _check_mask(causal, n, None, 0)
    _check_mask(windowed, n, 3, 0)
    _check_mask(torch.zeros(1, 1, n, n).masked_fill(~windowed, torch.finfo(torch.float32).min), n, 3, 0)  # additive
    _check_mask(None, n, 8, 0)  # a window longer than the input changes nothing
    for mask, window in ((causal, 3), (windowed, None), (torch.ones(1, 1, n, n, dtype=torch.bool), None),
                         (None, 3)):
        with pytest.raises(AttnflowError, match="layer 0"):
            _check_mask(mask, n, window, 0)


def test_the_row_capture_reports_its_pass_and_its_sweep_layer_by_layer(minilm_path):
    from factory import tiny_decoder

    import attnflow

    model, tokenizer = tiny_decoder(minilm_path)
    calls, named = [], []

    class Bar:
        def __call__(self, done, total):
            calls.append((done, total))

        def method(self, name, unit):
            named.append((name, unit))

    attnflow.explain("The keys to the cabinet are on the table", model, tokenizer=tokenizer, method="rollout",
                     progress=Bar())
    layers = model.config.num_hidden_layers
    assert named[0] == ("capture", "layers")
    assert calls[:2 * layers] == [(i, 2 * layers) for i in range(1, 2 * layers + 1)]
