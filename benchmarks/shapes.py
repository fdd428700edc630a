"""Random-weight decoders at the exact shapes of models people run (no download: the public configs'
numbers, written here), for the benchmarks of issue 44 and, layer-reduced, for the tests.

    from shapes import SHAPES, random_model
    model = random_model("llama-3.2-1b", dtype=torch.bfloat16)           # 1.24 B parameters, 2.5 GB in bf16
    small = random_model("gemma-2-2b", dtype=torch.float32, layers=2)   # the same layer shape, two layers

Sources: the models' config.json files as published (Llama-3.2-1B: hidden 2048, 16 layers, 32 query /
8 key-value heads of 64, llama3 rope scaling; Qwen2.5-1.5B: hidden 1536, 28 layers, 12 / 2 heads, query
/ key / value biases; Gemma-2-2B: hidden 2304, 26 layers, 8 / 4 heads of 256, a 4,096-token sliding
window on alternate layers, logits soft-capped at 50 in attention and 30 at the output). The weights are
random (std 0.02, as the configs' initializer_range): these measure memory and time, not behaviour.
"""

from __future__ import annotations

from typing import Any

SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-3.2-1b": ("llama", dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192))),
    "qwen2.5-1.5b": ("qwen2", dict(
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
        num_key_value_heads=2, hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, sliding_window=131072,
        bos_token_id=151643, eos_token_id=151643)),
    "gemma-2-2b": ("gemma2", dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=4096, query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=True,
        bos_token_id=2, eos_token_id=1, pad_token_id=0)),
}


def config(name: str, layers: int | None = None, vocab: int | None = None) -> Any:
    """The transformers config of shape ``name``; ``layers``/``vocab`` reduce it (for the tests)."""
    from transformers import AutoConfig

    if name not in SHAPES:
        raise SystemExit(f"unknown shape {name!r}; one of {', '.join(SHAPES)}")
    model_type, values = SHAPES[name]
    values = dict(values, initializer_range=0.02)
    if layers is not None:
        values["num_hidden_layers"] = layers
    if vocab is not None:
        values["vocab_size"] = vocab
    return AutoConfig.for_model(model_type, **values)


def random_model(name: str, *, dtype: Any = None, layers: int | None = None, vocab: int | None = None,
                 attention: str | None = None) -> Any:
    """A random-weight causal LM of shape ``name`` in ``dtype``, in eval mode, on the attention
    transformers picks by default (SDPA where the family supports it; Gemma 2: eager) unless ``attention``."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = config(name, layers, vocab)
    torch.manual_seed(0)
    extra = {} if attention is None else {"attn_implementation": attention}
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype or torch.float32, **extra)
    return model.eval()


def parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
