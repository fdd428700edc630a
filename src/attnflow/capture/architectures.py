"""THE per-architecture facts table: everything attnflow needs to know about a model family that its
``config`` does not say in a uniform way, in one place instead of forked model code.

One row per Hugging Face ``model_type`` (``config.model_type``). A row says:

- ``family``: ``"encoder"``, ``"decoder"``, ``"encoder-decoder"``, ``"vision"`` or ``"unsupported"``.
- ``unsupported``: why such a model cannot be explained (its "attention" is not a per-token,
  row-stochastic map over the input, or it has none); such models are refused before any work.
- ``window`` / ``layer_types`` / ``windowed_type``: where the config keeps its sliding-window size and
  its per-layer attention kinds, when they differ from the common spelling (``sliding_window`` and
  ``layer_types`` with ``"sliding_attention"`` entries); see :func:`layer_windows`.
- ``self_attention`` / ``cross_attention``: names of the attention sub-modules (the ``layer_name`` of
  transformers' ``_can_record_outputs``) of encoder-decoder models, checked against tiny models in
  the architecture matrix test; a norm-based weighting needs their value and output projections
  (``value`` / ``output``).
- ``value`` / ``output`` / ``qkv``: for the norm weighting (:mod:`attnflow.core.weighting`), the
  attention module's value projection and output projection, as dotted paths from the module that
  returns the attention weights (``../`` climbs to its parent: BERT's output projection sits in the
  ``BertSelfOutput`` beside ``BertSelfAttention``), and how a fused query/key/value projection lays
  out its output: None (the module outputs the values only), ``"concat"`` (queries, then keys, then
  values: GPT-2's ``Conv1D`` ``c_attn``, Phi-3's ``qkv_proj``) or ``"interleaved"`` (per head its
  query, key and value: GPT-NeoX's ``query_key_value``). Set in :data:`PROJECTIONS`, each row checked
  against a naive per-head computation on a tiny model in ``tests/test_norm_weighting.py``; a model
  type without them is refused for the norm weighting.
- ``fixes``: corrections applied while attnflow runs the model (see :func:`architecture_fixes`).
- ``mlp``: the feed-forward block, as a path from the attention module (set in :data:`MLPS`): logit
  attribution keeps it out of the direct path from an attention output to the logit.
- ``attention_class``: for a family whose model classes declare no ``_can_record_outputs`` (older
  modelling code), the class name of the module that returns ``(output, attention weights)``, so that
  streaming capture and the norm weighting can hook it (:func:`attnflow.capture.hooks.attention_modules`).

Rows are plain data: add one for a new family (and a case to ``tests/test_architectures_matrix.py``,
which generates the supported-architectures table in ``docs/architectures.md``). A model type without
a row is tried with the generic rules and refused with a sentence if its attention maps are not square
per-token maps (:func:`stack_attentions`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from attnflow.errors import AttnflowError


@dataclass(frozen=True)
class Architecture:
    """One row of :data:`ARCHITECTURES` (see the module docstring)."""

    family: str
    unsupported: str | None = None
    window: str = "sliding_window"
    layer_types: str = "layer_types"
    windowed_type: str = "sliding"
    self_attention: str | None = None
    cross_attention: str | None = None
    value: str | None = None
    output: str | None = None
    fixes: tuple[str, ...] = ()
    qkv: str | None = None
    attention_class: str | None = None
    mlp: str | None = None


FAMILIES = ("encoder", "decoder", "encoder-decoder", "vision", "unsupported")

_WINDOWED_VISION = ("windowed or hierarchical vision attention: layers attend within local windows or over a "
                    "downsampled, changing patch grid, so the layers' attention maps do not chain over one set of tokens")
_STATE_SPACE = "a state-space / recurrent model: it has no attention weights to roll out"
_HYBRID_SSM = ("a hybrid of state-space (Mamba) and attention layers: the state-space layers mix tokens "
               "without attention weights, so rollout through them is undefined")
_LINEAR = ("linear, kernelised or hashed attention: no full row-stochastic token-to-token attention map is "
           "formed, so there is nothing to roll out")
_SPARSE = ("sparse local/global attention: its attention outputs are not one square token-to-token map per "
           "layer")
_POOLED = "its layers pool or resample the sequence, so the layers' attention maps are over different tokens"
_STREAMS = ("two-stream attention (XLNet's content/query streams, ProphetNet's n-gram streams): a layer's "
            "attention is split over streams, not one map over the tokens")
_NO_ATTENTION = "it has no attention layers (convolution, pooling or Fourier mixing)"

_SEQ2SEQ_BART = dict(family="encoder-decoder", self_attention="self_attn", cross_attention="encoder_attn",
                     value="v_proj", output="out_proj")
_SEQ2SEQ_T5 = dict(family="encoder-decoder", self_attention="SelfAttention", cross_attention="EncDecAttention",
                   value="v", output="o")

ARCHITECTURES: dict[str, Architecture] = {
    # Every supported row has a case in tests/test_architectures_matrix.py (a test enforces it), which
    # also generates the supported-architectures table of docs/architectures.md.
    # ------------------------------------------------------------------ encoders (generic rules)
    **{t: Architecture("encoder") for t in (
        "bert", "roberta", "distilbert", "albert", "electra", "deberta-v2", "mpnet", "modernbert", "xlm-roberta")},
    # pre-LayerNorm BERT (GPT-2's block; the bundled agreement model); its classes declare no recorder
    "megatron-bert": Architecture("encoder", attention_class="MegatronBertSelfAttention"),
    # ------------------------------------------------------------------ decoders
    **{t: Architecture("decoder") for t in (
        "gpt2", "llama", "gemma", "qwen3", "phi", "gpt_neox", "opt", "bloom", "gptj", "gpt_bigcode", "stablelm", "olmo",
        "granite", "smollm3")},
    # sliding window on every layer (config.sliding_window, no layer_types)
    **{t: Architecture("decoder") for t in ("mistral", "mixtral", "starcoder2", "phi3")},
    # hybrid local/global: config.layer_types says which layers slide
    **{t: Architecture("decoder") for t in ("gemma2", "gemma3_text", "qwen2", "qwen2_moe", "cohere2", "olmo3")},
    # GPT-Neo's local layers keep a full KV cache and mask outside the window
    "gpt_neo": Architecture("decoder", window="window_size", layer_types="attention_layers", windowed_type="local"),
    # Falcon's eager attention (rotary variant) adds the boolean causal mask to the scores instead of masking:
    # without the fix every multi-token forward pass attends to future tokens (see architecture_fixes).
    "falcon": Architecture("decoder", fixes=("boolean_mask_as_bias",)),
    # ------------------------------------------------------------------ encoder-decoders
    **{t: Architecture(**_SEQ2SEQ_BART) for t in (
        "bart", "marian", "mbart", "pegasus", "m2m_100", "blenderbot", "blenderbot-small", "plbart")},
    **{t: Architecture(**_SEQ2SEQ_T5) for t in ("t5", "mt5", "umt5")},
    # ------------------------------------------------------------------ vision transformers
    **{t: Architecture("vision") for t in ("vit", "deit", "beit", "dinov2")},
    # ------------------------------------------------------------------ refused, with the reason
    **{t: Architecture("unsupported", _WINDOWED_VISION) for t in (
        "swin", "swinv2", "donut-swin", "maskformer-swin", "swin2sr", "dinat", "hiera", "pvt", "pvt_v2",
        "segformer", "levit", "mobilevit", "mobilevitv2", "vitdet")},
    **{t: Architecture("unsupported", _STATE_SPACE) for t in (
        "mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm", "recurrent_gemma")},
    **{t: Architecture("unsupported", _HYBRID_SSM) for t in (
        "jamba", "bamba", "zamba", "zamba2", "falcon_h1", "nemotron_h", "granitemoehybrid", "lfm2", "lfm2_moe")},
    **{t: Architecture("unsupported", _LINEAR) for t in (
        "qwen3_next", "kimi_linear", "minimax", "nystromformer", "yoso", "mra", "reformer")},
    **{t: Architecture("unsupported", _SPARSE) for t in (
        "longformer", "led", "big_bird", "bigbird_pegasus", "longt5")},
    **{t: Architecture("unsupported", _STREAMS) for t in ("xlnet", "prophetnet")},
    **{t: Architecture("unsupported", _POOLED) for t in ("funnel", "canine", "perceiver")},
    **{t: Architecture("unsupported", _NO_ATTENTION) for t in (
        "fnet", "convnext", "convnextv2", "resnet", "regnet", "poolformer", "focalnet", "efficientnet",
        "mobilenet_v1", "mobilenet_v2")},
}

# Value and output projections of decoder-only, encoder and vision rows, for the norm weighting (see the
# module docstring). Every entry has a case in tests/test_norm_weighting.py (a test enforces it).
_LLAMA_LIKE = dict(value="v_proj", output="o_proj")
PROJECTIONS: dict[str, dict[str, str]] = {
    **{t: dict(value="value", output="../output.dense") for t in (
        "bert", "roberta", "electra", "xlm-roberta", "megatron-bert")},
    "distilbert": dict(value="v_lin", output="out_lin"),
    **{t: _LLAMA_LIKE for t in (
        "llama", "gemma", "qwen3", "olmo", "granite", "smollm3", "stablelm", "mistral", "mixtral", "starcoder2",
        "gemma2", "gemma3_text", "qwen2")},
    "phi": dict(value="v_proj", output="dense"),
    "opt": dict(value="v_proj", output="out_proj"),
    "gpt2": dict(value="c_attn", output="c_proj", qkv="concat"),
    "phi3": dict(value="qkv_proj", output="o_proj", qkv="concat"),
    "gpt_neox": dict(value="query_key_value", output="dense", qkv="interleaved"),
    **{t: _LLAMA_LIKE for t in ("vit", "deit", "beit", "dinov2")},
}
# The feed-forward block of each layer, as a path from the attention module like ``value``/``output``:
# logit attribution (attnflow.capture.logit_paths) cuts it out of the direct path to the logit. Every
# entry is checked by the exact-sum tests of tests/test_logit_attribution.py on its family.
MLPS: dict[str, str] = {
    **{t: "../mlp" for t in (
        "llama", "gemma", "qwen3", "olmo", "granite", "smollm3", "stablelm", "mistral", "mixtral", "starcoder2",
        "gemma2", "gemma3_text", "qwen2", "phi", "phi3", "gpt2", "gpt_neox")},
    **{t: "../../intermediate" for t in ("bert", "roberta", "electra", "xlm-roberta", "megatron-bert")},
    "distilbert": "../ffn",
}
QKV_LAYOUTS = (None, "concat", "interleaved")
for _type, _names in PROJECTIONS.items():
    ARCHITECTURES[_type] = replace(ARCHITECTURES[_type], **_names)

for _type, _path in MLPS.items():
    ARCHITECTURES[_type] = replace(ARCHITECTURES[_type], mlp=_path)

for _type, _row in ARCHITECTURES.items():  # a typo in a row must fail on import, not on a user's model
    assert _row.qkv in QKV_LAYOUTS, (_type, _row.qkv)
    assert _row.family in FAMILIES, (_type, _row.family)
    assert (_row.family == "unsupported") == (_row.unsupported is not None), _type


def model_type(model_or_config: Any) -> str:
    """``config.model_type`` of a model, a config or a config dict ("" when unknown). Multimodal
    wrappers that keep the language model in ``text_config`` are read as the outer type."""
    config = getattr(model_or_config, "config", model_or_config)
    if isinstance(config, dict):
        return str(config.get("model_type") or "")
    return str(getattr(config, "model_type", "") or "")


def architecture(model_or_config: Any) -> Architecture | None:
    """The table's row for a model, config or config dict, or None for a model type without a row."""
    return ARCHITECTURES.get(model_type(model_or_config))


def is_encoder_decoder(model_or_config: Any) -> bool:
    config = getattr(model_or_config, "config", model_or_config)
    if isinstance(config, dict):
        return bool(config.get("is_encoder_decoder"))
    return bool(getattr(config, "is_encoder_decoder", False))


def refuse_unsupported(model_or_config: Any) -> None:
    """Raise :class:`AttnflowError` for a model family in the table's refused rows, naming the model
    type and why; cheap, so callers do it before loading weights or running anything."""
    row = architecture(model_or_config)
    if row is not None and row.unsupported:
        raise AttnflowError(f"{model_type(model_or_config)!r} models cannot be explained with attention rollout or "
                            f"flow: {row.unsupported}")


def refuse_unsupported_path(name: str) -> None:
    """The same for a model folder, from its ``config.json`` (hub ids are checked once loaded)."""
    try:
        config = json.loads((Path(name) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # no readable config here: loading reports that with its own sentence
    if isinstance(config, dict):
        refuse_unsupported(config)


def check_text_model(model: Any) -> None:
    """Refuse, before any forward pass, a model that plain text capture cannot explain: the refused
    families, and encoder-decoder models (which need a target text or generation)."""
    refuse_unsupported(model)
    if is_encoder_decoder(model):
        raise AttnflowError(f"{model_type(model) or type(model).__name__!r} is an encoder-decoder model: explain it "
                            "with a target text (attnflow.explain(source, model, target_text=...), CLI --target-text) "
                            "or with attnflow.generate(model, tokenizer, source)")


def layer_windows(model_or_config: Any) -> list[int | None]:
    """Per decoder layer, the sliding-window size (how many most recent keys a query sees, itself
    included), or None for a layer with full causal attention.

    From the config: ``layer_types`` (a list such as ``["sliding_attention", "full_attention", ...]``)
    names the windowed layers; without it, a set ``sliding_window`` applies to every layer (Mistral,
    Mixtral, Starcoder2). Rows of :data:`ARCHITECTURES` rename the attributes where a family spells
    them differently (GPT-Neo: ``attention_layers`` with ``"local"``, ``window_size``).
    """
    config = getattr(model_or_config, "config", model_or_config)
    config = getattr(config, "text_config", None) or config
    row = architecture(config) or Architecture("decoder")
    n_layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "num_layers", 0) or 0)
    window = getattr(config, row.window, None)
    kinds = getattr(config, row.layer_types, None)
    if not isinstance(window, int) or window <= 0:
        return [None] * n_layers
    if isinstance(kinds, (list, tuple)) and kinds:
        return [window if row.windowed_type in str(kind) else None for kind in kinds]
    if getattr(config, "use_sliding_window", True) is False:
        return [None] * n_layers
    return [window] * n_layers


def stack_attentions(attentions: Sequence[torch.Tensor], model: Any, dim: int = 1) -> torch.Tensor:
    """Stack per-layer attention ``(batch, heads, n, n)`` along ``dim`` (float32, CPU) after checking
    that every layer is the same square map; otherwise refuse with the model type, instead of
    ``torch.stack``'s error (windowed and pooled models change the token set between layers)."""
    shapes = [tuple(a.shape) for a in attentions]
    if any(len(s) != 4 or s[-1] != s[-2] or s != shapes[0] for s in shapes):
        name = model_type(model) or type(model).__name__
        raise AttnflowError(f"{name!r} returned attention maps that are not one square token-to-token map per layer "
                            f"(shapes {shapes[:3]}{' ...' if len(shapes) > 3 else ''}); attention rollout and flow "
                            "need every layer to attend over the same tokens, so this model is not supported")
    return torch.stack([a.detach().float().cpu() for a in attentions], dim=dim)


# ------------------------------------------------------------------------------------ fixes

def _boolean_mask_as_bias(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """transformers 5 hands these modules a boolean mask (True = may attend) that their eager path adds
    to the scores: +1 for visible keys, +0 for hidden ones, so future tokens stay visible. Turn it into
    the additive bias (0 / most negative) that the eager path expects; sdpa, the model's default, reads
    the boolean mask correctly, so this makes eager attention (whose weights attnflow needs) agree with it."""
    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        hidden = args[0] if args else kwargs.get("hidden_states")
        dtype = hidden.dtype if isinstance(hidden, torch.Tensor) else torch.float32
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
        kwargs = {**kwargs, "attention_mask": bias}
    return args, kwargs


# fix name -> (class-name suffix of the modules it hooks, forward pre-hook)
FIXES = {"boolean_mask_as_bias": ("Attention", _boolean_mask_as_bias)}


@contextmanager
def architecture_fixes(model: Any) -> Iterator[None]:
    """Apply the table's ``fixes`` for ``model`` (forward pre-hooks on its attention modules) for the
    duration of the block; nothing for models whose row has none."""
    row = architecture(model)
    handles = []
    try:
        for fix in row.fixes if row is not None else ():
            suffix, hook = FIXES[fix]
            for module in model.modules():
                if type(module).__name__.endswith(suffix):
                    handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()
