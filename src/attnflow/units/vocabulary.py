"""How much of a text a model's vocabulary covers.

A word the tokenizer maps to its unknown token (``[UNK]``) reaches the model as the same placeholder
as every other unknown word: attention to it, and any explanation built on that attention, says
nothing about the word. The bundled agreement model knows only its ~300 template words, so an
ordinary sentence is mostly ``[UNK]``; a warning says so instead of a confident-looking answer.
"""

from __future__ import annotations

import warnings
from typing import Any

from attnflow.hf.pypi_models import general_model_hint
from attnflow.errors import AttnflowWarning

# Warn when more than this share of the words is unknown to the model.
UNKNOWN_SHARE = 1 / 3


def unknown_words(tokenizer: Any, text: str) -> tuple[list[str], int]:
    """(the words of ``text`` that contain the unknown token, how many words there are), words as the
    tokenizer's pre-tokenizer splits them. ``([], 0)`` for tokenizers that cannot say (no unknown
    token, as in byte-level BPE, which has no unknown words, or no word alignment)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None:
        return [], 0
    enc = tokenizer(text, add_special_tokens=False)
    if not getattr(enc, "is_fast", False):
        return [], 0
    seen: dict[int, bool] = {}
    for token, word in zip(enc["input_ids"], enc.word_ids()):
        if word is not None:
            seen[word] = seen.get(word, False) or token == unk
    unknown = []
    for word, is_unknown in seen.items():
        if is_unknown:
            span = enc.word_to_chars(word)
            unknown.append(text[span.start:span.end] if span is not None else "?")
    return unknown, len(seen)


def warn_unknown_words(text: str, tokenizer: Any, model: str | None = None) -> None:
    """Warn (``AttnflowWarning``) when more than a third of ``text``'s words are
    unknown to the model, naming a general model to use instead."""
    unknown, total = unknown_words(tokenizer, text)
    if not total or len(unknown) <= UNKNOWN_SHARE * total:
        return
    shown = ", ".join(repr(w) for w in unknown[:4]) + (", ..." if len(unknown) > 4 else "")
    hint = general_model_hint(model)
    message = (f"{len(unknown)} of {total} words are not in the model's vocabulary ({len(tokenizer)} entries) and "
               f"reach it as {tokenizer.unk_token} ({shown}): its prediction and scores say little about this text"
               + (f"; {hint}" if hint else ""))
    warnings.warn(message, AttnflowWarning, stacklevel=3)
