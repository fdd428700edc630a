"""Bind once: one ``explain`` / ``generate`` of a tiny decoder given by path reads its ``config.json``
once from attnflow's own code, resolves the model once, and ablated flow runs no clean forward pass of
its own where the capture pass ran as the model runs (the capture pass's logits are reused: the eager
capture on an eager model, the row capture on an SDPA model)."""

from __future__ import annotations

import builtins
import io
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from factory import saved, tiny_decoder
from spies import calls_counted

import attnflow
from attnflow.hf import load

torch.set_num_threads(1)
SRC = str(Path(attnflow.__file__).parent)


def _caller_is_attnflow() -> bool:
    """Whether the nearest frame outside the standard library (pathlib, io, json) is attnflow's."""
    frame = sys._getframe(2)
    while frame is not None:
        file = frame.f_code.co_filename
        if "pathlib" not in file and not file.startswith(os.path.dirname(os.__file__)) or "site-packages" in file:
            return file.startswith(SRC)
        frame = frame.f_back
    return False


@contextmanager
def counting(model_class):
    """Counts: config.json opened by attnflow's code, resolve_model calls, forward passes of the
    whole model (``model_class`` instances), and how many of them had a key/value cache."""
    counts = {"config": 0, "resolve": 0, "forward": 0}
    real_open = builtins.open
    io_open = io.open

    def spy_open(file, *args, **kwargs):
        if os.fspath(file).endswith("config.json") if isinstance(file, (str, os.PathLike)) else False:
            if _caller_is_attnflow():
                counts["config"] += 1
        return real_open(file, *args, **kwargs)

    def pre_hook(module, args, kwargs):
        if isinstance(module, model_class):
            counts["forward"] += 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: pre_hook(module, args, None))
    builtins.open = spy_open
    io.open = spy_open
    try:
        with calls_counted({load.resolve_model.__code__: "resolve"}, counts):
            yield counts
    finally:
        builtins.open, io.open = real_open, io_open
        handle.remove()


@pytest.fixture(scope="module")
def decoder_dir(minilm_path, tmp_path_factory):
    return saved(*tiny_decoder(minilm_path), tmp_path_factory.mktemp("tiny-llama"))


TEXT = "the keys to the old cabinet"


def test_explain_by_path_reads_the_config_once_and_runs_no_extra_clean_pass(decoder_dir):
    from transformers import LlamaForCausalLM

    from attnflow.api.models import resolve

    load.clear_cache()
    attnflow.explain(TEXT, decoder_dir, paper_only=True)  # loads it: the counts below exclude loading
    with counting(LlamaForCausalLM) as paper:
        attnflow.explain(TEXT, decoder_dir, paper_only=True)
    with counting(LlamaForCausalLM) as counts:
        result = attnflow.explain(TEXT, decoder_dir)  # a decoder's default: rollout beside ablated flow
    assert list(result.methods) == ["rollout", "ablated-flow"]
    n = result.n_sources
    print("paper-only", paper, "default", counts)
    assert paper["config"] == 1 and paper["resolve"] == 1
    assert counts["config"] == 1 and counts["resolve"] == 1
    # one capture pass, then ablated flow: one edited run per chunk of <=16 sources (all n here), and
    # the clean prefix cache of [0, j0) grown once per chunk that starts after 0: none for one chunk. The
    # row capture ran on SDPA and attnflow loads models on eager attention: ablated flow reads its clean
    # logits from a pass of its own on eager attention, as its edited runs are (capture.rows)
    assert paper["forward"] == 1
    assert n <= 16 and counts["forward"] == 1 + 1 + 1
    model = resolve(decoder_dir).model
    model.set_attn_implementation("sdpa")
    try:  # a model on SDPA: the row capture's pass is its own, and its logits are reused
        with counting(LlamaForCausalLM) as on_sdpa:
            attnflow.explain(TEXT, decoder_dir)
    finally:
        model.set_attn_implementation("eager")
    assert on_sdpa["forward"] == 1 + 1
    # the reused logits change nothing: the engine with a clean pass of its own gives the same scores
    from attnflow.interventions.ablation import ablated_flow

    loaded = resolve(decoder_dir)
    ids = loaded.tokenizer(TEXT)["input_ids"]
    own = ablated_flow(loaded.model, ids, [len(ids) - 1]).scores[0, 0]
    np.testing.assert_allclose(result.row("ablated-flow")[-1], own, rtol=0, atol=1e-12)


def test_generate_by_path_reads_the_config_once_and_reuses_the_generations_logits(decoder_dir):
    from transformers import LlamaForCausalLM

    load.clear_cache()
    attnflow.generate(decoder_dir, prompt=TEXT, max_new_tokens=2)  # loads it
    with counting(LlamaForCausalLM) as base:
        attnflow.generate(decoder_dir, prompt=TEXT, max_new_tokens=2)
    with counting(LlamaForCausalLM) as counts:
        attnflow.generate(decoder_dir, prompt=TEXT, max_new_tokens=2, method=["rollout", "ablated-flow"])
    print("generate", base, "ablated", counts)
    assert base["config"] == counts["config"] == 1
    assert base["resolve"] == counts["resolve"] == 1
    # ablated flow over the prompt and the generated tokens (< 16 sources: one chunk, one edited run)
    # from the generation's own cache and logits: exactly one forward pass more than rollout alone
    assert counts["forward"] == base["forward"] + 1
