"""The per-architecture matrix: tiny random-weight models built from stock transformers configs (offline,
about a second each), checked against independent oracles.

- every text model: attnflow.capture gives the naive rollout (a plain loop) of the model's own
  ``output_attentions``, rows are stochastic, and decoders' rows are lower-triangular;
- sliding-window decoders: the window the per-architecture table declares is the one the model
  applies (zeros outside it, none missing inside it);
- every decoder: rollout tracked through generate (KV cache) equals rollout on one forward pass over
  prompt + completion;
- every decoder the row capture serves (attnflow.capture.rows: SDPA, queries and keys, no maps): its raw
  and rollout rows of the last position at every layer and its logits equal the eager capture's; the
  others are refused by it with the reason ``attnflow methods --model`` prints;
- every encoder-decoder: teacher-forced capture gives the naive joint rollout, rows stochastic,
  decoder self-attention causal, the table's module names exist, and joint rollout tracked through
  generate equals one teacher-forced pass;
- every vision model: capture_images gives the naive rollout of its output_attentions.

The supported-architectures table in docs/architectures.md is generated from CASES (and the refused
families from attnflow.hf.architectures): `ATTNFLOW_WRITE_DOCS=1 pytest tests/test_architectures_matrix.py`
rewrites it; otherwise a test fails when it is stale.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers as tf
from oracles import naive_joint_rollout, naive_rollout

import attnflow
from attnflow import AttnflowError
from attnflow.hf.architectures import (
    ARCHITECTURES,
    architecture,
    layer_windows,
    model_type,
    stack_attentions,
    why_not_rows,
)
from attnflow.capture.streaming import architecture_fixes
from attnflow.capture.rows import capture_rows, run_rows
from attnflow.capture.text import encode
from attnflow.core.raw import raw_rows
from attnflow.core.rollout import rollout_rows
from attnflow.hf.points import installed_on

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architectures.md"
TEXT = "the keys to the old cabinet are on the table"
NEW = 5  # generated tokens: prompt (11 tokens) + 5 runs well past the windows of 4


@dataclass(frozen=True)
class Case:
    name: str  # as the docs table shows it
    kind: str  # "encoder", "decoder", "encoder-decoder" or "vision"
    model_cls: str  # transformers class names
    config_cls: str
    config: dict
    special: str = ""  # what this case exercises beyond plain attention

    @property
    def model_type(self) -> str:
        return getattr(tf, self.config_cls).model_type

    def build(self, vocab: int) -> Any:
        """An eval-mode model with random weights (seeded)."""
        torch.manual_seed(0)
        extra = (dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, num_labels=3) if self.kind == "vision" else dict(vocab_size=vocab))
        return getattr(tf, self.model_cls)(getattr(tf, self.config_cls)(**extra, **self.config)).eval()


def _case(name: str, kind: str, model_cls: str, config_cls: str, special: str = "", **config: Any) -> Case:
    return Case(name, kind, model_cls, config_cls, config, special)


BERTISH = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=64)
DEC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
           max_position_embeddings=64, pad_token_id=0)
BARTISH = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
               encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0, eos_token_id=102,
               decoder_start_token_id=101, forced_eos_token_id=None)
T5ISH = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, pad_token_id=0,
             eos_token_id=102, decoder_start_token_id=0)
SLIDING = "sliding window 4, every layer"
HYBRID = "sliding window 4 on some layers, full on the others"

CASES = [
    # encoders
    _case("BERT", "encoder", "BertModel", "BertConfig", **BERTISH),
    _case("RoBERTa", "encoder", "RobertaModel", "RobertaConfig", pad_token_id=0, **BERTISH),
    _case("DistilBERT", "encoder", "DistilBertModel", "DistilBertConfig", dim=32, n_layers=2, n_heads=4, hidden_dim=64),
    _case("ALBERT", "encoder", "AlbertModel", "AlbertConfig", "shared layers", embedding_size=16, **BERTISH),
    _case("ELECTRA", "encoder", "ElectraModel", "ElectraConfig", embedding_size=16, **BERTISH),
    _case("Megatron-BERT", "encoder", "MegatronBertModel", "MegatronBertConfig", "pre-LayerNorm blocks (the bundled agreement model)",
          **BERTISH),
    _case("DeBERTa-v2", "encoder", "DebertaV2Model", "DebertaV2Config", "disentangled relative attention",
          relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"], **BERTISH),
    _case("MPNet", "encoder", "MPNetModel", "MPNetConfig", "relative position bias", **BERTISH),
    _case("ModernBERT", "encoder", "ModernBertModel", "ModernBertConfig", "local (windowed) attention on some layers",
          hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, local_attention=4,
          global_attn_every_n_layers=2, pad_token_id=0),
    _case("XLM-RoBERTa", "encoder", "XLMRobertaModel", "XLMRobertaConfig", pad_token_id=0, **BERTISH),
    # decoders
    _case("GPT-2", "decoder", "GPT2LMHeadModel", "GPT2Config", "absolute positions, fused qkv", n_positions=64,
          n_embd=32, n_layer=2, n_head=4),
    _case("Llama", "decoder", "LlamaForCausalLM", "LlamaConfig", "grouped-query attention", **DEC),
    _case("Mistral", "decoder", "MistralForCausalLM", "MistralConfig", SLIDING, sliding_window=4, **DEC),
    _case("Mixtral", "decoder", "MixtralForCausalLM", "MixtralConfig", f"mixture of experts, {SLIDING}",
          sliding_window=4, num_local_experts=2, num_experts_per_tok=1, **DEC),
    _case("Gemma", "decoder", "GemmaForCausalLM", "GemmaConfig", head_dim=8, **DEC),
    _case("Gemma 2", "decoder", "Gemma2ForCausalLM", "Gemma2Config", HYBRID, head_dim=8, sliding_window=4, **DEC),
    _case("Gemma 3 (text)", "decoder", "Gemma3ForCausalLM", "Gemma3TextConfig", HYBRID, head_dim=8, sliding_window=4,
          layer_types=["sliding_attention", "full_attention"] * 2, **DEC),
    _case("Qwen2", "decoder", "Qwen2ForCausalLM", "Qwen2Config", HYBRID, sliding_window=4, use_sliding_window=True,
          max_window_layers=2, **DEC),
    _case("Qwen2-MoE", "decoder", "Qwen2MoeForCausalLM", "Qwen2MoeConfig", f"mixture of experts, {HYBRID}",
          sliding_window=4, use_sliding_window=True, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
          shared_expert_intermediate_size=32, **DEC),
    _case("Qwen3", "decoder", "Qwen3ForCausalLM", "Qwen3Config", "query/key norms", head_dim=8, **DEC),
    _case("Phi", "decoder", "PhiForCausalLM", "PhiConfig", "partial rotary", hidden_size=32, intermediate_size=64,
          num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64),
    _case("Phi-3", "decoder", "Phi3ForCausalLM", "Phi3Config", SLIDING, sliding_window=4, **DEC),
    _case("Falcon", "decoder", "FalconForCausalLM", "FalconConfig",
          "multi-query; its eager mask is fixed by the table (see docs)", hidden_size=32, num_hidden_layers=2,
          num_attention_heads=4),
    _case("GPT-NeoX", "decoder", "GPTNeoXForCausalLM", "GPTNeoXConfig", hidden_size=32, intermediate_size=64,
          num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64),
    _case("OPT", "decoder", "OPTForCausalLM", "OPTConfig", hidden_size=32, ffn_dim=64, num_hidden_layers=2,
          num_attention_heads=4, word_embed_proj_dim=32, max_position_embeddings=64, pad_token_id=0),
    _case("BLOOM", "decoder", "BloomForCausalLM", "BloomConfig", "ALiBi", hidden_size=32, n_layer=2, n_head=4),
    _case("GPT-J", "decoder", "GPTJForCausalLM", "GPTJConfig", n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
          n_positions=64),
    _case("GPT-Neo", "decoder", "GPTNeoForCausalLM", "GPTNeoConfig", "local attention (window 4) on every other layer",
          hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], window_size=4,
          max_position_embeddings=64),
    _case("GPT-BigCode", "decoder", "GPTBigCodeForCausalLM", "GPTBigCodeConfig", "multi-query", n_embd=32, n_layer=2,
          n_head=4, n_positions=64, multi_query=True),
    _case("StableLM", "decoder", "StableLmForCausalLM", "StableLmConfig", **DEC),
    _case("OLMo", "decoder", "OlmoForCausalLM", "OlmoConfig", **DEC),
    _case("OLMo 3", "decoder", "Olmo3ForCausalLM", "Olmo3Config", HYBRID, sliding_window=4, **DEC),
    _case("Starcoder2", "decoder", "Starcoder2ForCausalLM", "Starcoder2Config", SLIDING, sliding_window=4, **DEC),
    _case("Cohere 2", "decoder", "Cohere2ForCausalLM", "Cohere2Config", HYBRID, sliding_window=4, **DEC),
    _case("Granite", "decoder", "GraniteForCausalLM", "GraniteConfig", **DEC),
    _case("SmolLM3", "decoder", "SmolLM3ForCausalLM", "SmolLM3Config", "layers without rotary positions", **DEC),
    # encoder-decoders
    _case("T5", "encoder-decoder", "T5ForConditionalGeneration", "T5Config", "relative position bias", **T5ISH),
    _case("mT5", "encoder-decoder", "MT5ForConditionalGeneration", "MT5Config", **T5ISH),
    _case("UMT5", "encoder-decoder", "UMT5ForConditionalGeneration", "UMT5Config", "per-layer relative position bias",
          **T5ISH),
    _case("BART", "encoder-decoder", "BartForConditionalGeneration", "BartConfig", **BARTISH),
    _case("Marian", "encoder-decoder", "MarianMTModel", "MarianConfig", "sinusoidal positions", **BARTISH),
    _case("mBART", "encoder-decoder", "MBartForConditionalGeneration", "MBartConfig", **BARTISH),
    _case("Pegasus", "encoder-decoder", "PegasusForConditionalGeneration", "PegasusConfig", **BARTISH),
    _case("M2M-100", "encoder-decoder", "M2M100ForConditionalGeneration", "M2M100Config", **BARTISH),
    _case("Blenderbot", "encoder-decoder", "BlenderbotForConditionalGeneration", "BlenderbotConfig", **BARTISH),
    _case("Blenderbot-small", "encoder-decoder", "BlenderbotSmallForConditionalGeneration", "BlenderbotSmallConfig",
          **BARTISH),
    _case("PLBart", "encoder-decoder", "PLBartForConditionalGeneration", "PLBartConfig", **BARTISH),
    # vision transformers (image classifiers)
    _case("ViT", "vision", "ViTForImageClassification", "ViTConfig"),
    _case("DeiT", "vision", "DeiTForImageClassification", "DeiTConfig"),
    _case("BEiT", "vision", "BeitForImageClassification", "BeitConfig", "mean-pooled read-out", use_mean_pooling=True),
    _case("DINOv2", "vision", "Dinov2ForImageClassification", "Dinov2Config"),
]
IDS = [c.name for c in CASES]
TEXT_CASES = [c for c in CASES if c.kind in ("encoder", "decoder")]


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return tf.AutoTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def built(tokenizer):
    """name -> model, built once per module (several tests use each)."""
    cache: dict[str, Any] = {}

    def get(case: Case) -> Any:
        if case.name not in cache:
            tf.logging.set_verbosity_error()
            model = case.build(len(tokenizer))
            model.set_attn_implementation("eager")
            cache[case.name] = model
        return cache[case.name]

    return get


def _forward(model: Any, **inputs: Any) -> Any:
    with torch.no_grad(), architecture_fixes(model):
        return model(**inputs, output_attentions=True)


@pytest.mark.parametrize("case", TEXT_CASES, ids=[c.name for c in TEXT_CASES])
def test_capture_is_the_naive_rollout(case, built, tokenizer):
    model = built(case)
    maps = attnflow.capture(model, tokenizer, TEXT)
    enc = encode(tokenizer, [TEXT])
    enc.pop("special_tokens_mask")
    out = _forward(model, **enc)
    direct = np.stack([a[0].double().numpy() for a in out.attentions])
    np.testing.assert_allclose(maps.attentions.numpy(), direct, atol=1e-6)
    r = np.asarray(attnflow.rollout(maps))
    np.testing.assert_allclose(r, naive_rollout(direct), atol=1e-6)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(direct.sum(-1), 1.0, atol=1e-5)
    assert maps.causal == (case.kind == "decoder")
    if maps.causal:
        upper = np.triu(np.ones(r.shape[-2:], dtype=bool), 1)
        assert np.all(direct[..., upper] == 0) and np.all(r[..., upper] == 0)
    else:
        assert np.all(direct[0].mean(0)[0, 1:] > 0)  # an encoder's first token sees later ones


SLIDING_CASES = [c for c in TEXT_CASES if "window" in c.special and c.kind == "decoder"]


@pytest.mark.parametrize("case", SLIDING_CASES, ids=[c.name for c in SLIDING_CASES])
def test_the_table_declares_the_window_the_model_applies(case, built, tokenizer):
    model = built(case)
    maps = attnflow.capture(model, tokenizer, TEXT)
    att = maps.attentions.numpy()
    windows = layer_windows(model)
    assert len(windows) == att.shape[0] and any(w is not None for w in windows)
    n = att.shape[-1]
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]
    for layer, window in enumerate(windows):
        visible = (distance >= 0) & (distance < (window or n))
        assert np.all(att[layer][:, ~visible] == 0), f"layer {layer} attends outside its declared window {window}"
        assert np.all(att[layer][:, visible] > 0), f"layer {layer} ignores keys inside its declared window {window}"


DECODERS = [c for c in CASES if c.kind == "decoder"]


@pytest.mark.parametrize("case", DECODERS, ids=[c.name for c in DECODERS])
def test_generation_tracking_equals_one_forward_pass(case, built, tokenizer):
    model = built(case)
    gen = attnflow.generate(model, tokenizer, TEXT, max_new_tokens=NEW, min_new_tokens=NEW)
    m = gen.input_length
    assert len(gen.targets) == NEW and m + NEW - 1 > 4  # past every window of 4
    ids = encode(tokenizer, [TEXT])["input_ids"][0].tolist() + gen.meta["generated_ids"]
    full = np.asarray(attnflow.rollout(_forward(model, input_ids=torch.tensor([ids])).attentions))
    rows = gen.dense("rollout")
    np.testing.assert_allclose(rows[:, :, : m + NEW], full[:, m - 1: m + NEW - 1, : m + NEW].transpose(1, 0, 2),
                               atol=1e-5)


SEQ2SEQ = [c for c in CASES if c.kind == "encoder-decoder"]
TARGET = "die schlüssel zum alten schrank"


@pytest.mark.parametrize("case", SEQ2SEQ, ids=[c.name for c in SEQ2SEQ])
def test_seq2seq_capture_is_the_naive_joint_rollout(case, built, tokenizer):
    model = built(case)
    result = attnflow.explain(TEXT, model, tokenizer=tokenizer, target_text=TARGET, method="all")
    src = encode(tokenizer, [TEXT])
    labels = tokenizer(text_target=TARGET)["input_ids"]
    start = model.generation_config.decoder_start_token_id
    out = _forward(model, input_ids=src["input_ids"], attention_mask=src["attention_mask"],
                   decoder_input_ids=torch.tensor([[start, *labels[:-1]]]))
    enc, dec, cross = (np.stack([a[0].double().numpy() for a in out.encoder_attentions]),
                       np.stack([a[0].double().numpy() for a in out.decoder_attentions]),
                       np.stack([a[0].double().numpy() for a in out.cross_attentions]))
    s, t = enc.shape[-1], dec.shape[-1]
    assert result.kind == "seq2seq" and result.input_length == s and len(result.targets) == t == len(labels)
    d = result.dense("rollout")  # (targets, layers, S + 1 + T)
    np.testing.assert_allclose(d[:, :, :-1], naive_joint_rollout(enc, dec, cross).transpose(1, 0, 2), atol=1e-6)
    np.testing.assert_allclose(d.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(result.dense("raw")[:, :, :s], cross.mean(1).transpose(1, 0, 2), atol=1e-6)
    upper = np.triu(np.ones((t, t), dtype=bool), 1)
    assert np.all(dec[:, :, upper] == 0)
    flow = result.dense("flow")
    np.testing.assert_allclose(flow.sum(-1), 1.0, atol=1e-6)
    row = architecture(model)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    assert row.family == "encoder-decoder" and {row.self_attention, row.cross_attention, row.value, row.output} <= names


@pytest.mark.parametrize("case", SEQ2SEQ, ids=[c.name for c in SEQ2SEQ])
def test_seq2seq_generation_tracking_equals_one_teacher_forced_pass(case, built, tokenizer):
    model = built(case)
    gen = attnflow.generate(model, tokenizer, TEXT, max_new_tokens=NEW, min_new_tokens=NEW)
    assert gen.kind == "seq2seq" and len(gen.targets) == NEW
    src = encode(tokenizer, [TEXT])
    start = model.generation_config.decoder_start_token_id
    out = _forward(model, input_ids=src["input_ids"], attention_mask=src["attention_mask"],
                   decoder_input_ids=torch.tensor([[start, *gen.meta["generated_ids"][:-1]]]))
    from attnflow.core.joint import joint_rollout

    full = joint_rollout(out.encoder_attentions, out.decoder_attentions, out.cross_attentions)
    np.testing.assert_allclose(gen.dense("rollout")[:, :, :-1], np.asarray(full).transpose(1, 0, 2), atol=1e-5)


VISION = [c for c in CASES if c.kind == "vision"]


@pytest.mark.parametrize("case", VISION, ids=[c.name for c in VISION])
def test_vision_capture_is_the_naive_rollout(case, built, tokenizer):
    from attnflow.capture.vision import capture_images

    model = built(case)
    image = np.random.default_rng(0).random((16, 16, 3))
    maps = capture_images(model, [image])
    with torch.no_grad():
        out = model(pixel_values=maps.pixel_values, output_attentions=True)
    direct = np.stack([a[0].double().numpy() for a in out.attentions])
    r = np.asarray(attnflow.rollout(maps.attentions[0]))
    np.testing.assert_allclose(r, naive_rollout(direct), atol=1e-6)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-6)
    result = attnflow.explain_image(image, model, method="all")
    assert result.grid == (4, 4)


def test_every_case_has_a_row_of_its_family(built):
    seen = set()
    for case in CASES:
        kind = model_type(built(case))
        assert kind == case.model_type
        seen.add(kind)
        assert kind in ARCHITECTURES, f"{case.name}: add a row for {kind!r} to hf/architectures.py"
        assert ARCHITECTURES[kind].family == case.kind, case.name
    # a supported row without a case would claim support nobody checks
    unchecked = sorted(t for t, row in ARCHITECTURES.items() if row.family != "unsupported" and t not in seen)
    assert not unchecked, f"rows without a matrix case: {unchecked}"
    assert len(CASES) >= 25


def test_refused_families_exist_in_transformers():
    known = set(tf.CONFIG_MAPPING.keys())
    refused = sorted(t for t, row in ARCHITECTURES.items() if row.family == "unsupported")
    assert refused and not [t for t in refused if t not in known]


# ------------------------------------------------------------------------------------- refusals

def _swin() -> Any:
    torch.manual_seed(0)
    return tf.SwinForImageClassification(tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                       num_heads=[2, 2], window_size=4, num_labels=3)).eval()


def _mamba(vocab: int) -> Any:
    torch.manual_seed(0)
    return tf.MambaForCausalLM(tf.MambaConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=2)).eval()


def test_unsupported_models_are_refused_before_any_work(tokenizer, monkeypatch):
    swin, mamba = _swin(), _mamba(len(tokenizer))
    for model in (swin, mamba):  # a forward pass would be work: refuse before it
        monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("the model ran"))
    with pytest.raises(AttnflowError, match="'swin' models cannot be explained.*windowed"):
        attnflow.explain_image(np.zeros((32, 32, 3)), swin)
    with pytest.raises(AttnflowError, match="'mamba' models cannot be explained.*state-space"):
        attnflow.explain("hello there", mamba, tokenizer=tokenizer)
    with pytest.raises(AttnflowError, match="'mamba' models cannot be explained"):
        attnflow.generate(mamba, tokenizer, "hello there", max_new_tokens=2)


def test_unsupported_models_from_the_cli_one_line_exit_2(tokenizer, tmp_path, monkeypatch, capsys):
    from cli_runner import run_cli

    swin_dir, mamba_dir = tmp_path / "swin", tmp_path / "mamba"
    _swin().save_pretrained(swin_dir)
    _mamba(len(tokenizer)).save_pretrained(mamba_dir)
    tokenizer.save_pretrained(mamba_dir)
    image = ROOT / "docs" / "img" / "demo_agreement.png"
    for args in (["explain", "hello there", "--model", str(mamba_dir), "--json", str(tmp_path / "a.json")],
                 ["generate", "hello there", "--model", str(mamba_dir)],
                 ["explain-image", str(image), "--model", str(swin_dir), "--png", str(tmp_path / "b.png")]):
        capsys.readouterr()
        code, out, err = run_cli(monkeypatch, capsys, *args)
        assert code == 2, (args, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("attnflow: error: ") and "cannot be explained" in lines[0]
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.png"))


def test_unknown_models_with_non_square_maps_get_a_sentence():
    class Windowed(torch.nn.Module):
        config = type("Config", (), {"model_type": "my_windowed_vit"})()

    maps = [torch.rand(1, 2, 16, 16), torch.rand(1, 2, 4, 4)]
    with pytest.raises(AttnflowError, match="'my_windowed_vit' returned attention maps that are not one square"):
        stack_attentions(maps, Windowed())


def test_falcon_fix_makes_eager_attention_match_the_models_default_path(built, tokenizer):
    # Under sdpa (Falcon's default) the boolean causal mask is applied correctly; the eager path that
    # returns attention weights adds it to the scores instead. With the table's fix both agree.
    model = built(next(c for c in CASES if c.name == "Falcon"))
    ids = encode(tokenizer, [TEXT])["input_ids"]
    model.set_attn_implementation("sdpa")
    try:
        with torch.no_grad():
            reference = model(input_ids=ids).logits
    finally:
        model.set_attn_implementation("eager")
    fixed = _forward(model, input_ids=ids)
    np.testing.assert_allclose(fixed.logits.numpy(), reference.numpy(), atol=1e-5)
    upper = np.triu(np.ones((ids.shape[1],) * 2, dtype=bool), 1)
    assert all(np.all(a[0].numpy()[:, upper] == 0) for a in fixed.attentions)


def _config_of(case: Case) -> Any:
    """The case's config with the class it builds named, as a saved model folder's config says it."""
    config = getattr(tf, case.config_cls)(vocab_size=30522, **case.config)
    config.architectures = [case.model_cls]
    return config


@pytest.mark.parametrize("case", DECODERS, ids=[c.name for c in DECODERS])
def test_row_capture_equals_the_eager_capture(case, built, tokenizer):
    model = built(case)
    why = why_not_rows(model)
    assert why == why_not_rows(_config_of(case))  # what attnflow methods --model says from the config alone
    n = len(encode(tokenizer, [TEXT])["input_ids"][0])
    if why:
        with pytest.raises(AttnflowError, match="cannot explain"):
            capture_rows(model, tokenizer, TEXT, n - 1, ["raw", "rollout"])
        return
    maps = attnflow.capture(model, tokenizer, TEXT, head_fusion="mean")
    got = capture_rows(model, tokenizer, TEXT, n - 1, ["raw", "rollout"], memory=4_000)  # chunks of a few queries
    assert got.attentions is None and got.rows.positions == (n - 1,)
    rollout = rollout_rows(maps, [n - 1], head_fusion="mean")
    raw = raw_rows(maps, [n - 1], head_fusion="mean")
    torch.testing.assert_close(got.rows.values["rollout"], rollout, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.rows.values["raw"], raw, atol=1e-5, rtol=0)
    assert got.last_logits is None  # the model runs on eager: its pass on SDPA is not its own clean readout
    # ... but equals it to rounding (soft-capped layers: the receiver's own chunked attention)
    enc = encode(tokenizer, [TEXT])
    enc.pop("special_tokens_mask")
    _, out, own = run_rows(model, enc, n - 1, [], residual=0.5, head_fusion="mean", causal_norm=None)
    assert not own
    torch.testing.assert_close(out.logits[0, -1], maps.last_logits, atol=1e-5, rtol=1e-5)
    assert got.tokens == maps.tokens and model.config._attn_implementation == "eager" and not installed_on(model)


# ------------------------------------------------------------------------ the docs' tables

def _checks(kind: str, case: Case | None = None) -> str:
    if kind == "decoder" and case is not None:
        why = why_not_rows(_config_of(case))
        rows = f"explain: eager maps ({why})" if why else "explain: target rows on SDPA = eager rows"
        return f"{_checks(kind)}; {rows}"
    return {"encoder": "capture = naive rollout; rows stochastic",
            "decoder": "capture = naive rollout; rows stochastic; lower-triangular; generation = one pass",
            "encoder-decoder": "capture = naive joint rollout; rows stochastic; causal decoder; generation = "
                               "teacher-forced pass",
            "vision": "capture = naive rollout; rows stochastic"}[kind]


def matrix_table() -> str:
    lines = ["| architecture | model_type | kind | what it exercises | checked |", "|---|---|---|---|---|"]
    lines += [f"| {c.name} | `{c.model_type}` | {c.kind} | {c.special or '-'} | {_checks(c.kind, c)} |"
              for c in CASES]
    return "\n".join(lines)


def refused_table() -> str:
    by_reason: dict[str, list[str]] = {}
    for kind, row in ARCHITECTURES.items():
        if row.unsupported:
            by_reason.setdefault(row.unsupported, []).append(f"`{kind}`")
    lines = ["| model types | why they are refused |", "|---|---|"]
    lines += [f"| {', '.join(sorted(kinds, key=lambda k: k.strip('`')))} | {reason} |"
              for reason, kinds in by_reason.items()]
    return "\n".join(lines)


def _section(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
    assert pattern.search(text), f"docs/architectures.md has no <!-- {name}:start/end --> markers"
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def test_docs_tables_are_generated_from_the_matrix():
    text = DOC.read_text(encoding="utf-8")
    expected = _section(_section(text, "matrix", matrix_table()), "refused", refused_table())
    if os.environ.get("ATTNFLOW_WRITE_DOCS") == "1" and text != expected:
        DOC.write_text(expected, encoding="utf-8")
        text = DOC.read_text(encoding="utf-8")
    assert text == expected, ("docs/architectures.md is stale: run "
                              "`ATTNFLOW_WRITE_DOCS=1 pytest tests/test_architectures_matrix.py -k docs`")
