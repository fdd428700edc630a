"""One ``ModelKind``, computed once: following a tiny decoder through ``generate`` and through ``explain``
with the decoder defaults, "what kind of model is this" (family, head, type: the architecture table's
``model_family`` / ``model_head``) is computed once per call, and not at all for a model bound once
(a ``Loaded``); every check and method below the entry reads the record it carries.

The rooms below the entry never climb back into ``attnflow.api`` (pinned for every module by
tests/test_architecture.py); here: no module outside the architecture table and ``attnflow.hf.kind``
asks the table for a family or a head."""

from __future__ import annotations

import ast
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from factory import saved, tiny_decoder
from spies import calls_counted

import attnflow
from attnflow.hf import architectures, load
from attnflow.hf import kind

torch.set_num_threads(1)
SRC = Path(attnflow.__file__).parent
TEXT = "the keys to the old cabinet"


@contextmanager
def counting():
    """Calls of the one kind computation and of the table's family / head questions."""
    codes = {kind._computed.__code__: "kind", architectures.model_family.__code__: "family",
             architectures.model_head.__code__: "head"}
    with calls_counted(codes, dict.fromkeys(codes.values(), 0)) as counts:
        yield counts


@pytest.fixture(scope="module")
def decoder_dir(minilm_path, tmp_path_factory):
    return saved(*tiny_decoder(minilm_path), tmp_path_factory.mktemp("tiny-llama-kind"))


def test_explain_with_the_decoder_defaults_computes_the_kind_once(decoder_dir):
    load.clear_cache()
    attnflow.explain(TEXT, decoder_dir)  # loads it
    with counting() as counts:
        result = attnflow.explain(TEXT, decoder_dir)  # not named: rollout beside ablated flow
    assert list(result.methods) == ["rollout", "ablated-flow"]
    assert counts == {"kind": 1, "family": 1, "head": 1}, counts


def test_generate_computes_the_kind_once(decoder_dir):
    load.clear_cache()
    attnflow.generate(decoder_dir, prompt=TEXT, max_new_tokens=2)  # loads it
    with counting() as counts:
        result = attnflow.generate(decoder_dir, prompt=TEXT, max_new_tokens=2, method=None)  # the decoder defaults
    assert list(result.methods) == ["rollout", "ablated-flow"]
    assert counts == {"kind": 1, "family": 1, "head": 1}, counts


def test_a_model_bound_once_is_never_asked_its_kind_again(decoder_dir):
    load.clear_cache()
    bound = attnflow.api.models.resolve(decoder_dir)
    assert bound.model_kind == kind.ModelKind("decoder", "causal-lm", "llama") and bound.model_kind.lm
    with counting() as counts:
        explained = attnflow.explain(TEXT, bound)
        generated = attnflow.generate(bound, prompt=TEXT, max_new_tokens=2, method=None)
    assert list(explained.methods) == list(generated.methods) == ["rollout", "ablated-flow"]
    assert counts == {"kind": 0, "family": 0, "head": 0}, counts


def test_a_loaded_model_passed_as_it_is_is_asked_once(minilm_path):
    model, tokenizer = tiny_decoder(minilm_path)
    with counting() as counts:
        attnflow.explain(TEXT, model, tokenizer=tokenizer, method="rollout")
        attnflow.explain(TEXT, model, tokenizer=tokenizer)
    assert counts["kind"] == 1, counts


def test_a_registered_family_is_not_answered_from_a_stale_kind(minilm_path):
    model, _ = tiny_decoder(minilm_path)
    assert kind.kind_of(model).family == "decoder"
    row, projections = architectures.ARCHITECTURES["llama"], architectures.PROJECTIONS["llama"]
    try:
        architectures.register_architecture("llama", "encoder", replace_row=True)
        assert kind.kind_of(model).family == "encoder"
    finally:
        architectures.ARCHITECTURES["llama"], architectures.PROJECTIONS["llama"] = row, projections
        architectures.EDITS[0] += 1
    assert kind.kind_of(model).family == "decoder"


def _calls(path: Path, names: set[str]) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", None)) in names]


def test_only_the_table_and_the_kind_module_ask_for_a_family_or_a_head():
    allowed = {SRC / "hf" / "architectures.py", SRC / "hf" / "kind.py"}
    # ModelInfo.loads_as: the config's family under another head, without asking for the head again
    allowed_family = {SRC / "hf" / "load.py"}
    found = {str(p.relative_to(SRC)): lines for p in SRC.rglob("*.py") if p not in allowed
             for lines in [_calls(p, {"model_head"} if p in allowed_family else {"model_family", "model_head"})]
             if lines}
    assert not found, f"ask attnflow.hf.kind.kind_of (or read the record's model_kind) instead: {found}"
