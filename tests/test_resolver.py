"""The model resolver (attnflow.api.models.resolve): family and head from the architecture table, never
from class names; a user registers a family attnflow does not know (attnflow.register_architecture),
and a tiny model of it is then explained like the stock family it copies (oracle: the same weights
loaded as a stock Llama give the same scores)."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    LlamaConfig,
    LlamaForCausalLM,
)

import attnflow
from attnflow.api.models import describe, resolve
from attnflow.hf.architectures import ARCHITECTURES, PROJECTIONS
from attnflow.errors import AttnflowError
from tests.factory import tiny_decoder

TEXT = "the keys to the cabinet are"


class TinyFamConfig(LlamaConfig):
    model_type = "tinyfam"


class TinyFamForCausalLM(LlamaForCausalLM):
    """A family transformers does not know: Llama's body under another model type and class name."""

    config_class = TinyFamConfig


def tiny(config_class, model_class, minilm_path):
    return tiny_decoder(minilm_path, layers=2, config_class=config_class, model_class=model_class)


@pytest.fixture
def registered():
    yield
    ARCHITECTURES.pop("tinyfam", None)
    PROJECTIONS.pop("tinyfam", None)


def test_family_and_head_come_from_the_table(minilm_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    classifier = resolve(BertForSequenceClassification(config).eval(), tokenizer)
    bare = resolve(BertModel(config).eval(), tokenizer)
    assert (classifier.family, classifier.head, classifier.kind) == ("encoder", "classification", "classifier")
    assert (bare.family, bare.head, bare.kind) == ("encoder", "base", "encoder")
    llama = resolve(*tiny(LlamaConfig, LlamaForCausalLM, minilm_path))
    assert (llama.family, llama.head, llama.kind) == ("decoder", "causal-lm", "decoder")
    assert describe(minilm_path) == ("encoder", "base")
    with pytest.raises(AttnflowError, match="pass the tokenizer together with a loaded model"):
        resolve(llama.model)


def test_a_registered_family_is_explained_like_the_stock_one(minilm_path, registered):
    model, tokenizer = tiny(TinyFamConfig, TinyFamForCausalLM, minilm_path)
    unknown = resolve(model, tokenizer)
    assert (unknown.family, unknown.head) == ("encoder", "")  # no row, no head transformers knows
    with pytest.raises(AttnflowError, match="weighting"):  # no projections for the norm weighting
        attnflow.explain(TEXT, model, tokenizer=tokenizer, weighting="norm", target="last")

    row = attnflow.register_architecture("tinyfam", "decoder", heads={"TinyFamForCausalLM": "causal-lm"},
                                         value="v_proj", output="o_proj")
    assert ARCHITECTURES["tinyfam"] is row and PROJECTIONS["tinyfam"] == {"value": "v_proj", "output": "o_proj"}
    known = resolve(model, tokenizer)
    assert (known.family, known.head, known.kind) == ("decoder", "causal-lm", "decoder")

    stock = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in model.config.to_dict().items()
                                            if k not in ("model_type", "architectures")})).double().eval()
    stock.load_state_dict(model.state_dict())
    stock.set_attn_implementation("eager")
    for weighting in ("attention", "norm"):
        mine = attnflow.explain(TEXT, model, tokenizer=tokenizer, method="all", weighting=weighting)
        theirs = attnflow.explain(TEXT, stock, tokenizer=tokenizer, method="all", weighting=weighting)
        assert mine.target == len(mine.sources) - 1  # a decoder's default target: the last token
        for m in ("raw", "rollout", "flow"):
            np.testing.assert_allclose(mine.row(m), theirs.row(m), atol=1e-10)


def test_registering_refuses_what_the_table_cannot_hold(registered):
    with pytest.raises(AttnflowError, match="already in the architecture table"):
        attnflow.register_architecture("llama", "decoder")
    with pytest.raises(AttnflowError, match="family must be one of"):
        attnflow.register_architecture("tinyfam", "decoder-only")
    with pytest.raises(AttnflowError, match="'values' is not a column of the architecture table"):
        attnflow.register_architecture("tinyfam", "decoder", values="v_proj")
    with pytest.raises(AttnflowError, match="heads must be among"):
        attnflow.register_architecture("tinyfam", "decoder", heads={"TinyFamForCausalLM": "lm"})
    with pytest.raises(AttnflowError, match="name both the value and the output projection"):
        attnflow.register_architecture("tinyfam", "decoder", value="v_proj")
    assert "tinyfam" not in ARCHITECTURES
