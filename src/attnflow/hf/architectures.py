"""THE per-architecture facts table: everything attnflow needs to know about a model family that its
``config`` does not say in a uniform way, in one place instead of forked model code.

One row per Hugging Face ``model_type`` (``config.model_type``). A row says:

- ``family``: ``"encoder"``, ``"decoder"``, ``"encoder-decoder"``, ``"vision"`` or ``"unsupported"``.
- ``unsupported``: why such a model cannot be explained (its "attention" is not a per-token,
  row-stochastic map over the input, or it has none); such models are refused before any work.
- ``window`` / ``layer_types`` / ``windowed_type``: where the config keeps its sliding-window size and
  its per-layer attention kinds, when they differ from the common spelling (``sliding_window`` and
  ``layer_types`` with ``"sliding_attention"`` entries); see ``layer_windows``.
- ``self_attention`` / ``cross_attention``: names of the attention sub-modules (the ``layer_name`` of
  transformers' ``_can_record_outputs``) of encoder-decoder models, checked against tiny models in
  the architecture matrix test; a norm-based weighting needs their value and output projections
  (``value`` / ``output``).
- ``value`` / ``output`` / ``qkv``: for the norm weighting (``attnflow.core.weighting``), the
  attention module's value projection and output projection, as dotted paths from the module that
  returns the attention weights (``../`` climbs to its parent: BERT's output projection sits in the
  ``BertSelfOutput`` beside ``BertSelfAttention``), and how a fused query/key/value projection lays
  out its output: None (the module outputs the values only), ``"concat"`` (queries, then keys, then
  values: GPT-2's ``Conv1D`` ``c_attn``, Phi-3's ``qkv_proj``) or ``"interleaved"`` (per head its
  query, key and value: GPT-NeoX's ``query_key_value``). Set in ``PROJECTIONS``, each row checked
  against a naive per-head computation on a tiny model in ``tests/test_norm_weighting.py``; a model
  type without them is refused for the norm weighting.
- ``fixes``: corrections applied while attnflow runs the model (see
  ``attnflow.capture.streaming.architecture_fixes``).
- ``lrp_gate``: for AttnLRP (``attnflow.interventions.attnlrp``), the two factors of a gated feed-forward
  block's elementwise product (``act(gate(x)) * up(x)``), as paths from the attention module like
  ``mlp``, whose gradients the uniform rule halves; ``()`` for a family whose feed-forward block has no
  product; None (the default) for a family whose rules are not checked, which AttnLRP refuses. Every
  row that sets it has a conservation case in ``tests/test_attnlrp.py``.
- ``attention_class``: for a family whose model classes declare no ``_can_record_outputs`` (older
  modelling code), the class name of the module that returns ``(output, attention weights)``, so that
  streaming capture and the norm weighting can hook it (``attnflow.capture.streaming.attention_modules``).

Rows are plain data: add one for a new family (and a case to ``tests/test_architectures_matrix.py``,
which generates the supported-architectures table in ``docs/architectures.md``). A model type without
a row is tried with the generic rules and refused with a sentence if its attention maps are not square
per-token maps (``stack_attentions``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnflow.errors import AttnflowError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Architecture:
    """One row of ``ARCHITECTURES`` (see the module docstring)."""

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
    heads: tuple[tuple[str, str], ...] = ()  # (model class name, head) for classes transformers' auto maps lack
    mlp: str | None = None
    lrp_gate: tuple[str, ...] | None = None


FAMILIES = ("encoder", "decoder", "encoder-decoder", "vision", "unsupported")
EDITS = [0]  # how many rows register_architecture has set: a kind remembered under fewer is read again

# A model's head: what its class puts on top of the family's body, read from transformers' auto-model
# mappings (model_type -> class name), or from a row's ``heads`` for a registered family.
HEAD_MAPPINGS = {
    "classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "base": "MODEL_MAPPING_NAMES",
}

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
# Value and output projections for the norm weighting (see the module docstring); every row that names
# them has a case in tests/test_norm_weighting.py (a test enforces it).
_BERT_LIKE = dict(value="value", output="../output.dense")
_LLAMA_LIKE = dict(value="v_proj", output="o_proj")

ARCHITECTURES: dict[str, Architecture] = {
    # Every supported row has a case in tests/test_architectures_matrix.py (a test enforces it), which
    # also generates the supported-architectures table of docs/architectures.md.
    # ------------------------------------------------------------------ encoders (generic rules)
    **{t: Architecture("encoder", **_BERT_LIKE) for t in ("bert", "roberta", "electra", "xlm-roberta")},
    "distilbert": Architecture("encoder", value="v_lin", output="out_lin"),
    **{t: Architecture("encoder") for t in ("albert", "deberta-v2", "mpnet", "modernbert")},
    # pre-LayerNorm BERT (GPT-2's block; the bundled agreement model); its classes declare no recorder
    "megatron-bert": Architecture("encoder", attention_class="MegatronBertSelfAttention", **_BERT_LIKE),
    # ------------------------------------------------------------------ decoders
    **{t: Architecture("decoder", **_LLAMA_LIKE) for t in (
        "llama", "gemma", "qwen3", "olmo", "granite", "smollm3", "stablelm")},
    "gpt2": Architecture("decoder", value="c_attn", output="c_proj", qkv="concat"),
    "phi": Architecture("decoder", value="v_proj", output="dense"),
    "opt": Architecture("decoder", value="v_proj", output="out_proj"),
    "gpt_neox": Architecture("decoder", value="query_key_value", output="dense", qkv="interleaved"),
    **{t: Architecture("decoder") for t in ("bloom", "gptj", "gpt_bigcode")},
    # sliding window on every layer (config.sliding_window, no layer_types)
    **{t: Architecture("decoder", **_LLAMA_LIKE) for t in ("mistral", "mixtral", "starcoder2")},
    "phi3": Architecture("decoder", value="qkv_proj", output="o_proj", qkv="concat"),
    # hybrid local/global: config.layer_types says which layers slide
    **{t: Architecture("decoder", **_LLAMA_LIKE) for t in ("gemma2", "gemma3_text", "qwen2")},
    **{t: Architecture("decoder") for t in ("qwen2_moe", "cohere2", "olmo3")},
    # GPT-Neo's local layers keep a full KV cache and mask outside the window
    "gpt_neo": Architecture("decoder", window="window_size", layer_types="attention_layers", windowed_type="local"),
    # Falcon's eager attention (rotary variant) adds the boolean causal mask to the scores instead of masking:
    # without the fix every multi-token forward pass attends to future tokens (see architecture_fixes in
    # capture.streaming).
    "falcon": Architecture("decoder", fixes=("boolean_mask_as_bias",)),
    # ------------------------------------------------------------------ encoder-decoders
    **{t: Architecture(**_SEQ2SEQ_BART) for t in (
        "bart", "marian", "mbart", "pegasus", "m2m_100", "blenderbot", "blenderbot-small", "plbart")},
    **{t: Architecture(**_SEQ2SEQ_T5) for t in ("t5", "mt5", "umt5")},
    # ------------------------------------------------------------------ vision transformers
    **{t: Architecture("vision", **_LLAMA_LIKE) for t in ("vit", "deit", "beit", "dinov2")},
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

# The feed-forward block of each layer, as a path from the attention module like ``value``/``output``:
# logit attribution (attnflow.interventions.logit_paths) cuts it out of the direct path to the logit. Every
# entry's family is checked by the exact-sum tests of tests/test_logit_attribution.py where it has one.
MLPS: dict[str, str] = {
    **{t: "../mlp" for t in (
        "llama", "gemma", "qwen3", "olmo", "granite", "smollm3", "stablelm", "mistral", "mixtral", "starcoder2",
        "gemma2", "gemma3_text", "qwen2", "phi", "phi3", "gpt2", "gpt_neox")},
    **{t: "../../intermediate" for t in ("bert", "roberta", "electra", "xlm-roberta", "megatron-bert")},
    "distilbert": "../ffn",
}
for _type, _path in MLPS.items():
    ARCHITECTURES[_type] = replace(ARCHITECTURES[_type], mlp=_path)

# AttnLRP's gated products (see ``lrp_gate`` in the module docstring); every entry has a conservation case
# in tests/test_attnlrp.py (a test enforces it).
LRP_GATES: dict[str, tuple[str, ...]] = {
    **{t: ("../mlp.act_fn", "../mlp.up_proj") for t in ("llama", "mistral", "qwen2", "gemma2", "gemma3_text")},
    **{t: () for t in ("gpt2", "bert")},
}
for _type, _gate in LRP_GATES.items():
    ARCHITECTURES[_type] = replace(ARCHITECTURES[_type], lrp_gate=_gate)
QKV_LAYOUTS = (None, "concat", "interleaved")


def _check_row(model_type: str, row: Architecture) -> None:
    """A typo in a row must fail on import (or on registering), not on a user's model."""
    if row.qkv not in QKV_LAYOUTS:
        raise AttnflowError(f"qkv must be one of {QKV_LAYOUTS}; got {row.qkv!r} for {model_type!r}")
    if row.family not in FAMILIES:
        raise AttnflowError(f"family must be one of {', '.join(FAMILIES)}; got {row.family!r} for {model_type!r}")
    if (row.family == "unsupported") != (row.unsupported is not None):
        raise AttnflowError(f"{model_type!r}: a row says why exactly when its family is 'unsupported'")
    bad = sorted(set(dict(row.heads).values()) - set(HEAD_MAPPINGS))
    if bad:
        raise AttnflowError(f"heads must be among {', '.join(HEAD_MAPPINGS)}; got {bad} for {model_type!r}")
    if (row.value is None) != (row.output is None):
        raise AttnflowError(f"{model_type!r}: name both the value and the output projection, or neither")


for _type, _row in ARCHITECTURES.items():
    _check_row(_type, _row)


def _projections(row: Architecture) -> dict[str, str | None]:
    return dict(value=row.value, output=row.output, **({"qkv": row.qkv} if row.qkv else {}))


def _weighs(row: Architecture) -> bool:
    """Whether the norm weighting of a decoder-only, encoder or vision row can run (encoder-decoder rows
    name their projections for the seq2seq capture, which has no norm weighting)."""
    return row.value is not None and row.family != "encoder-decoder"


# The rows that name value and output projections for the norm weighting, read from the table.
PROJECTIONS: dict[str, dict[str, str | None]] = {t: _projections(row) for t, row in ARCHITECTURES.items()
                                                 if _weighs(row)}


def register_architecture(model_type: str, family: str, *, heads: dict[str, str] | None = None,
                          replace_row: bool = False, **facts: Any) -> Architecture:
    """Add a row to the architecture table, so attnflow explains a model family without an edit to the
    package (like inseq's ``register_model_config``).

    Args:
        model_type: The family's ``config.model_type``.
        family: "encoder", "decoder", "encoder-decoder" or "vision" (or "unsupported" with
            ``unsupported="why"``).
        heads: Model class name -> head ("base", "classification", "causal-lm", "seq2seq",
            "image-classification") for classes transformers' auto mappings do not list (a custom
            family's).
        replace_row: Replace a row the table has already (else it is refused).
        **facts: Any other column (``value``, ``output``, ``qkv``, ``window``, ``attention_class``,
            ...; see the ``attnflow.hf.architectures`` module docstring).

    Returns:
        The row, an ``Architecture``.

    Raises:
        AttnflowError: A model type the table has already (without ``replace_row``), ``heads`` that
            do not map class names to heads, a column the table does not have, or a row that fails
            its checks.
    """
    if not isinstance(model_type, str) or not model_type:
        raise AttnflowError(f"model_type must be a non-empty string; got {model_type!r}")
    if model_type in ARCHITECTURES and not replace_row:
        raise AttnflowError(f"{model_type!r} is already in the architecture table; pass replace_row=True to change it")
    if heads is not None and (not isinstance(heads, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                                      for k, v in heads.items())):
        raise AttnflowError("heads must map model class names to heads, e.g. {'MyForCausalLM': 'causal-lm'}; "
                            f"got {heads!r}")
    fields = set(Architecture.__dataclass_fields__) - {"family", "heads"}
    unknown = sorted(set(facts) - fields)
    if unknown:
        raise AttnflowError(f"{unknown[0]!r} is not a column of the architecture table; the columns are "
                            f"{', '.join(sorted(fields))}")
    row = Architecture(family, heads=tuple(sorted((heads or {}).items())), **facts)
    _check_row(model_type, row)
    ARCHITECTURES[model_type] = row
    EDITS[0] += 1  # kinds computed against the table before (attnflow.hf.kind remembers them) are stale
    PROJECTIONS.pop(model_type, None)
    if _weighs(row):
        PROJECTIONS[model_type] = _projections(row)
    return row


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


def class_name(model_or_config: Any) -> str:
    """The model class: a loaded model's, or the first of a config's ``architectures`` ("" if unsaid)."""
    config = getattr(model_or_config, "config", None)
    if config is not None and not isinstance(model_or_config, dict):
        return type(model_or_config).__name__
    if isinstance(model_or_config, dict):
        archs = model_or_config.get("architectures")
    else:
        archs = getattr(model_or_config, "architectures", None)
    return str(archs[0]) if isinstance(archs, (list, tuple)) and archs else ""


def model_head(model_or_config: Any) -> str:
    """What a model's class puts on its body (see ``HEAD_MAPPINGS``): an exact lookup of the class in its
    row's ``heads``, then in transformers' auto-model mappings for its ``model_type`` (every type's, for
    a config that names none); "" when neither names the class (or a config does not say its class)."""
    name, kind = class_name(model_or_config), model_type(model_or_config)
    if not name:
        return ""
    row = ARCHITECTURES.get(kind)
    if row is not None and name in dict(row.heads):
        return dict(row.heads)[name]
    from transformers.models.auto import modeling_auto

    for head, mapping_name in HEAD_MAPPINGS.items():
        mapping = getattr(modeling_auto, mapping_name, {})
        # a config without model_type (or of a type the mapping lacks): the class among every type's
        candidates = [mapping[kind]] if kind in mapping else list(mapping.values())
        if any(name == c or (not isinstance(c, str) and name in c) for c in candidates):
            return head
    return ""


def model_family(model_or_config: Any, head: str | None = None) -> str:
    """The table's family of a model, config or config dict; for a model type without a row, what its
    config says (``is_encoder_decoder``, ``is_decoder``) or its head (a causal-LM head: a decoder; ``head``
    when already read), else "encoder"."""
    row = architecture(model_or_config)
    if row is not None:
        return row.family
    config = getattr(model_or_config, "config", model_or_config)
    flag = (config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d))
    if flag("is_encoder_decoder", False):
        return "encoder-decoder"
    if flag("is_decoder", False) or (model_head(model_or_config) if head is None else head) == "causal-lm":
        return "decoder"
    return "encoder"


def is_encoder_decoder(model_or_config: Any) -> bool:
    config = getattr(model_or_config, "config", model_or_config)
    if isinstance(config, dict):
        return bool(config.get("is_encoder_decoder"))
    return bool(getattr(config, "is_encoder_decoder", False))


def refuse_unsupported(model_or_config: Any) -> None:
    """Raise ``AttnflowError`` for a model family in the table's refused rows, naming the model
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
    Mixtral, Starcoder2). Rows of ``ARCHITECTURES`` rename the attributes where a family spells
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
    import torch  # here, not at the top: the table is read before torch loads (attnflow.api.checks)

    shapes = [tuple(a.shape) for a in attentions]
    if any(len(s) != 4 or s[-1] != s[-2] or s != shapes[0] for s in shapes):
        name = model_type(model) or type(model).__name__
        raise AttnflowError(f"{name!r} returned attention maps that are not one square token-to-token map per layer "
                            f"(shapes {shapes[:3]}{' ...' if len(shapes) > 3 else ''}); attention rollout and flow "
                            "need every layer to attend over the same tokens, so this model is not supported")
    return torch.stack([a.detach().float().cpu() for a in attentions], dim=dim)


def _read(config: Any, key: str, default: Any = None) -> Any:
    return config.get(key, default) if isinstance(config, dict) else getattr(config, key, default)


def why_not_rows(model_or_config: Any, family: str | None = None) -> str:
    """Why this model's target rows cannot be captured on its fast attention without the maps ("" when they
    can; ``attnflow.capture.rows``), from a loaded model or its config alone (no weights read);
    ``family``: the model's, when its kind is known already (``attnflow.hf.kind``)."""
    family = model_family(model_or_config) if family is None else family
    if family != "decoder":
        return f"it is {'an' if family[:1] in 'aeiou' else 'a'} {family} model (the row capture is for decoders)"
    row = architecture(model_or_config)
    if row is not None and row.fixes:
        return f"attnflow corrects its attention masks ({', '.join(row.fixes)})"
    config = getattr(model_or_config, "config", model_or_config)
    config = _read(config, "text_config") or config
    if _read(config, "alibi") or _read(config, "position_embedding_type") == "alibi":
        return "its ALiBi position biases are not recomputed from queries and keys"
    if _read(config, "reorder_and_upcast_attn"):
        return "reorder_and_upcast_attn computes its attention outside transformers' attention functions"
    if isinstance(model_or_config, dict) or not hasattr(model_or_config, "config"):
        import transformers

        cls = getattr(transformers, class_name(model_or_config) or "-", None)
    else:
        cls = type(model_or_config)
    if cls is None:
        return f"its model class is not known here ({model_type(model_or_config) or 'no model_type'})"
    if not getattr(cls, "_supports_attention_backend", False):
        return f"{cls.__name__} does not run its attention through transformers' attention functions"
    return ""


# ------------------------------------------------------------------------------------ fixes

def _boolean_mask_as_bias(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """transformers 5 hands these modules a boolean mask (True = may attend) that their eager path adds
    to the scores: +1 for visible keys, +0 for hidden ones, so future tokens stay visible. Turn it into
    the additive bias (0 / most negative) that the eager path expects; sdpa, the model's default, reads
    the boolean mask correctly, so this makes eager attention (whose weights attnflow needs) agree with it."""
    import torch

    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        hidden = args[0] if args else kwargs.get("hidden_states")
        dtype = hidden.dtype if isinstance(hidden, torch.Tensor) else torch.float32
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
        kwargs = {**kwargs, "attention_mask": bias}
    return args, kwargs


# fix name -> (class-name suffix of the modules it corrects: the ``fixes`` hook point, a receiver before them)
FIXES = {"boolean_mask_as_bias": ("Attention", _boolean_mask_as_bias)}
