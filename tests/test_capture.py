import numpy as np
import pytest
import torch
import transformers

import attnflow
from attnflow import AttnflowError


def test_capture_returns_per_layer_attention_and_tokens(minilm):
    model, tokenizer = minilm
    maps = attnflow.capture(model, tokenizer, "The keys to the cabinet")
    assert tuple(maps.attentions.shape) == (6, 12, 7, 7)
    assert maps.tokens == ["[CLS]", "the", "keys", "to", "the", "cabinet", "[SEP]"]
    assert maps.special == [0, 6] and maps.mask is None and not maps.causal
    np.testing.assert_allclose(maps.attentions.sum(-1).numpy(), 1.0, atol=1e-5)


def test_capture_runs_an_sdpa_model_on_eager_for_the_call_only(minilm_path):
    model = transformers.AutoModel.from_pretrained(minilm_path, attn_implementation="sdpa")
    eager = transformers.AutoModel.from_pretrained(minilm_path, attn_implementation="eager")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    maps = attnflow.capture(model, tokenizer, "hello world")
    assert model.config._attn_implementation == "sdpa"  # the user's model is as it was
    assert maps.attentions.shape[0] == 6
    torch.testing.assert_close(maps.attentions, attnflow.capture(eager, tokenizer, "hello world").attentions)


def test_padded_batch_gives_each_text_its_own_rollout(minilm):
    model, tokenizer = minilm
    texts = ["a short one", "The keys to the cabinet are on the table"]
    batch = attnflow.capture(model, tokenizer, texts)
    assert batch.attentions.dim() == 5 and batch.mask.shape == (2, 11)
    together = attnflow.rollout(batch)
    for i, text in enumerate(texts):
        alone = attnflow.capture(model, tokenizer, text)
        n = len(alone.tokens)
        assert batch.tokens[i][:n] == alone.tokens
        torch.testing.assert_close(together[i, :, :n, :n], attnflow.rollout(alone), atol=1e-5, rtol=1e-4)
        assert torch.all(together[i, :, n:, :] == 0)


def test_too_long_text_is_refused_or_truncated_with_a_warning(minilm):
    model, tokenizer = minilm
    text = "word " * 600
    with pytest.raises(AttnflowError, match="at most 512"):
        attnflow.capture(model, tokenizer, text)
    with pytest.warns(UserWarning, match="truncated"):
        maps = attnflow.capture(model, tokenizer, text, truncate=True)
    assert len(maps.tokens) == 512


@pytest.mark.parametrize("text", ["", "   ", [], ["ok", ""]])
def test_empty_text_is_refused(minilm, text):
    model, tokenizer = minilm
    with pytest.raises(AttnflowError, match="non-empty"):
        attnflow.capture(model, tokenizer, text)


def test_explain_matches_core_rollout_on_model_attentions(minilm):
    model, tokenizer = minilm
    enc = tokenizer("the key to the cabinets", return_tensors="pt")
    with torch.no_grad():
        attentions = model(**enc, output_attentions=True).attentions
    expected = attnflow.rollout(attentions)[:, 0, :].numpy()
    expl = attnflow.explain("the key to the cabinets", model, tokenizer=tokenizer, method="rollout", target="cls")
    np.testing.assert_allclose(expl.row(), expected, atol=1e-6)
    assert expl.target == 0 and expl.sources[0] == "[CLS]"
    last = attnflow.explain("the key to the cabinets", model, tokenizer=tokenizer, method="raw", target="last")
    np.testing.assert_allclose(last.row(), attnflow.raw(attentions)[:, -1, :].numpy(), atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "saliency"}, "method must be one of"),
    ({"target": "middle"}, "target must be"),
    ({"target": 99}, "outside"),
    ({"head_fusion": None}, "head_fusion"),
    ({"text": ["two", "texts"]}, "one text"),
])
def test_explain_refuses_bad_requests(minilm, kwargs, message):
    model, tokenizer = minilm
    text = kwargs.pop("text", "hello there")
    with pytest.raises(AttnflowError, match=message):
        attnflow.explain(text, model, tokenizer=tokenizer, **kwargs)


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(AttnflowError, match="does not exist"):
        attnflow.load_model(str(tmp_path / "nope"))
    with pytest.raises(AttnflowError, match="no config.json"):
        attnflow.load_model(str(tmp_path))


def test_tokens_read_as_text_for_byte_level_and_as_pieces_for_wordpiece(minilm):
    from attnflow.capture.text import token_strings

    model, tokenizer = minilm
    ids = tokenizer("unbelievably", add_special_tokens=False)["input_ids"]
    assert token_strings(tokenizer, ids) == tokenizer.convert_ids_to_tokens(ids)  # keeps the ## marks
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(vocab={"Ġ": 0, "a": 1, "b": 2, "Ġa": 3}, merges=[("Ġ", "a")]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe)
    ids = fast("b a")["input_ids"]
    assert fast.convert_ids_to_tokens(ids) == ["b", "Ġa"]
    assert token_strings(fast, ids) == ["b", " a"]
