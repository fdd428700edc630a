"""What kind of model this is, computed once: ``ModelKind`` (family, head, ``model_type`` and
what follows from them) from a config or a loaded model and the architecture table
(``attnflow.hf.architectures``).

``kind_of`` is the one function that answers the question. An entry point resolves a model into a
record that carries its kind (``attnflow.hf.load.ModelInfo``, ``attnflow.api.Loaded``);
checks and methods read that record. A room below the entry that holds only the model asks
``kind_of`` again and gets the kind remembered for that model object (a weak reference kept here,
never an attribute on the user's model), not a second computation.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class ModelKind:
    """family: "encoder", "decoder", "encoder-decoder", "vision", "unsupported" ("" when not known: a
    hub id whose config is not here); head: "base", "classification", "causal-lm", "seq2seq",
    "image-classification" ("" when its class does not say); model_type: ``config.model_type``;
    unsupported: why the table refuses the family (None when it does not); is_decoder: the config's own
    ``is_decoder`` (an encoder family run as a decoder: its attention is causal too)."""

    family: str = ""
    head: str = ""
    model_type: str = ""
    unsupported: str | None = None
    is_decoder: bool = False

    @property
    def known(self) -> bool:
        return bool(self.family)

    @property
    def name(self) -> str | None:
        """What a user would call the model: "encoder", "classifier", "decoder", "encoder-decoder",
        "vision" ("unsupported"); None when not known."""
        if not self.family:
            return None
        return "classifier" if self.family == "encoder" and self.head == "classification" else self.family

    @property
    def causal(self) -> bool:
        """Its queries see only earlier keys: a decoder (or a config that says ``is_decoder``)."""
        return self.family == "decoder" or self.is_decoder

    @property
    def lm(self) -> bool:
        """A decoder with its language-model head (next-token logits; the decoder defaults apply)."""
        return self.family == "decoder" and self.head == "causal-lm"

    @property
    def encoder_decoder(self) -> bool:
        return self.family == "encoder-decoder"

    @property
    def vision(self) -> bool:
        return self.family == "vision"

    def with_head(self, head: str) -> ModelKind:
        """The same family loaded under another head (a task's class: a config saying ``LlamaModel``
        loaded for generation is a causal LM)."""
        return self if head == self.head else replace(self, head=head)


UNKNOWN = ModelKind()

_remembered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _computed(model_or_config: Any) -> ModelKind:
    """The computation itself: every family/head/type question the table answers, asked once."""
    from attnflow.hf.architectures import architecture, model_family, model_head, model_type

    row, head = architecture(model_or_config), model_head(model_or_config)
    config = getattr(model_or_config, "config", model_or_config)
    flag = config.get("is_decoder") if isinstance(config, dict) else getattr(config, "is_decoder", False)
    return ModelKind(family=model_family(model_or_config, head), head=head, model_type=model_type(model_or_config),
                     unsupported=row.unsupported if row else None, is_decoder=bool(flag))


def kind_of(model_or_config: Any) -> ModelKind:
    """The ``ModelKind`` of a loaded model, a config or a config dict (an empty dict: unknown).
    A loaded model's is computed once and remembered while the model lives."""
    if isinstance(model_or_config, ModelKind):
        return model_or_config
    if isinstance(model_or_config, dict) and not model_or_config:
        return UNKNOWN
    holder = model_or_config if hasattr(model_or_config, "config") and not isinstance(model_or_config, dict) else None
    if holder is not None:
        try:
            found = _remembered.get(holder)
        except TypeError:  # not weakly referable: computed each time
            return _computed(model_or_config)
        if found is not None and found[0] == _edits():
            return found[1]
    kind = _computed(model_or_config)
    if holder is not None:
        remember(holder, kind)
    return kind


def _edits() -> int:
    from attnflow.hf.architectures import EDITS

    return EDITS[0]


def remember(model: Any, kind: ModelKind) -> None:
    """Record ``model``'s kind as an entry point resolved it (a loaded model whose kind its config's
    record already told), so that the rooms below read it instead of computing it again (until the
    architecture table gains a row)."""
    try:
        _remembered[model] = (_edits(), kind)
    except TypeError:
        pass


def carried_kind(model: Any) -> ModelKind:
    """The ``ModelKind`` a record carries (a ``ModelInfo`` or a
    ``Loaded``: its ``model_kind``, computed once when the model was
    resolved), a ``ModelKind`` itself, or a loaded model's (``kind_of``); unknown for a name not
    inspected (a hub id whose config is not here) or no model."""
    if model is None or isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        return UNKNOWN
    if isinstance(model, ModelKind):
        return model
    carried = getattr(model, "model_kind", None)
    if isinstance(carried, ModelKind):
        return carried
    return kind_of(model)


def kind_name(model: Any) -> str | None:
    """"encoder", "classifier", "decoder", "encoder-decoder" or "vision" for anything ``carried_kind``
    takes; None when it cannot be told without loading, or for a family no method's list of model kinds
    names (state-space models, ...: refused by their own sentence, which says why)."""
    from attnflow.config.registry import MODEL_KINDS

    name = carried_kind(model).name
    return name if name in MODEL_KINDS else None
