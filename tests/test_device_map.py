"""A model dispatched over devices with ``device_map`` (accelerate's hooks), offloading to the CPU and to
disk, gives every method the same scores as the same model in one piece, and stays as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from factory import tiny_decoder

import attnflow
from attnflow.config import registry

TEXT = "The keys to the cabinet are on the table"


@pytest.fixture(scope="module")
def models(minilm_path, tmp_path_factory):
    from accelerate import dispatch_model

    whole, tokenizer = tiny_decoder(minilm_path)
    split, _ = tiny_decoder(minilm_path)
    # layers 1 and 2 offloaded to disk (their weights on the meta device between calls), the rest in memory
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                  "model.layers.2": "disk", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    split = dispatch_model(split, device_map=device_map, offload_dir=str(tmp_path_factory.mktemp("offload")))
    assert split.model.layers[1].self_attn.v_proj.weight.device.type == "meta"
    return whole, split, tokenizer


def _hooks(model):
    return {n: (len(m._forward_hooks), len(m._forward_pre_hooks), sorted(m.__dict__)) for n, m in model.named_modules()}


@pytest.mark.parametrize("method", [m for m in registry.names("text") if m != "grad-rollout"])
def test_every_method_on_a_dispatched_model_equals_the_whole_model(models, method):
    whole, split, tokenizer = models
    before = _hooks(split)
    expected = attnflow.explain(TEXT, whole, tokenizer=tokenizer, method=method)
    got = attnflow.explain(TEXT, split, tokenizer=tokenizer, method=method)
    assert got.methods == expected.methods
    for name in expected.methods:
        np.testing.assert_allclose(got.dense(name), expected.dense(name), rtol=1e-9, atol=1e-9, err_msg=name)
    assert _hooks(split) == before  # accelerate's own hooks stay; nothing of attnflow's is left


def test_the_norm_weighting_reads_offloaded_projections(models):
    whole, split, tokenizer = models
    expected = attnflow.explain(TEXT, whole, tokenizer=tokenizer, method="rollout", weighting="norm")
    got = attnflow.explain(TEXT, split, tokenizer=tokenizer, method="rollout", weighting="norm")
    np.testing.assert_allclose(got.dense("rollout"), expected.dense("rollout"), rtol=1e-9, atol=1e-9)
    assert split.model.layers[2].self_attn.o_proj.weight.device == torch.device("meta")  # offloaded again
