"""AttentionMaps: what capture hands to the methods."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AttentionMaps:
    """Per-layer attention of one input (or a padded batch) plus what is needed to read it.

    attentions: ``(layers, heads, n, n)`` or ``(batch, layers, heads, n, n)``; row = query, column = key;
        layer 0 is the lowest layer (the one that reads the embeddings).
    tokens: the ``n`` token strings (a list of lists for a batch; padding included).
    mask: ``(n,)`` or ``(batch, n)`` booleans, True for real tokens, or None when nothing is padded.
    causal: True when queries only see keys at or before their own position (decoders).
    special: indices of special tokens such as [CLS]/[SEP] (per example for a batch).
    input_ids: the token ids the model saw, when known.
    logits: the model's output logits for the same forward pass, when captured.
    """

    attentions: Any
    tokens: list
    mask: Any = None
    causal: bool = False
    special: list = field(default_factory=list)
    input_ids: Any = None
    logits: Any = None

    @property
    def n_layers(self) -> int:
        return int(self.attentions.shape[-4])

    @property
    def n_heads(self) -> int:
        return int(self.attentions.shape[-3])
