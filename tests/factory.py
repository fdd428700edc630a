"""Small synthetic results for view and report tests (no model)."""

from __future__ import annotations

import numpy as np

from attnflow.results import Attribution, Block


def text_result(tokens: list[str], layers: int = 2, target: int = 0, methods=("raw", "rollout", "flow"),
                seed: int = 0, **fields) -> Attribution:
    """One target's random stochastic rows per method (every layer), like ``attnflow.explain``."""
    rng = np.random.default_rng(seed)
    n = len(tokens)
    blocks = {m: Block.rows(rng.dirichlet(np.ones(n), size=(1, layers)), [target]) for m in methods}
    return Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(n)), blocks=blocks,
                       n_layers=layers, target=target, method="rollout" if "rollout" in methods else methods[0],
                       **fields)


# ------------------------------------------------------------------ tiny random-weight models (no tokenizer)

def tiny_model(kind: str, vocab: int = 97, seed: int = 0, dtype=None):
    """A tiny random-weight model from a stock transformers config, eager attention, eval mode,
    float64 by default (so batched and one-at-a-time passes agree to the last digits). ``kind``:
    "llama" (grouped-query), "mistral" (sliding window 4), "gpt2", "gemma2" (hybrid window 4,
    soft-capping), "bert" (a sequence classifier, 3 labels)."""
    import torch
    import transformers as T

    small = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                 max_position_embeddings=64, initializer_range=0.3)
    gqa = dict(small, num_key_value_heads=2)
    configs = {
        "llama": (T.LlamaConfig, T.LlamaForCausalLM, gqa),
        "mistral": (T.MistralConfig, T.MistralForCausalLM, dict(gqa, sliding_window=4)),
        "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, dict(gqa, head_dim=8, sliding_window=4)),
        "gpt2": (T.GPT2Config, T.GPT2LMHeadModel, dict(n_embd=32, n_layer=3, n_head=4, n_positions=64,
                                                        initializer_range=0.3)),
        "bert": (T.BertConfig, T.BertForSequenceClassification, dict(small, num_labels=3)),
    }
    config_cls, model_cls, kwargs = configs[kind]
    torch.manual_seed(seed)
    config = config_cls(vocab_size=vocab, **kwargs)
    config._attn_implementation = "eager"
    model = model_cls(config).to(dtype or torch.float64).eval()
    return model


def saved(model, tokenizer, folder) -> str:
    """``model`` and ``tokenizer`` saved into ``folder``, to load by path as users do (the CLI, the app,
    the resolver); returns the folder as a string."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def tiny_decoder(minilm_path, layers: int = 3, config_class=None, model_class=None):
    """``(model, tokenizer)``: a tiny random Llama (grouped-query, float64, eager) over MiniLM's vocabulary,
    with weights large enough (std 0.5) that its outputs depend on the input, so a faithfulness or
    attribution oracle bites. ``config_class``/``model_class``: Llama subclasses (a registered custom
    family) in place of the stock ones."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    config = (config_class or LlamaConfig)(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.5)
    model = (model_class or LlamaForCausalLM)(config).double().eval()
    model.set_attn_implementation("eager")
    return model, tokenizer
