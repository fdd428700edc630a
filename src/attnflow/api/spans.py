"""What ``spans=`` (CLI ``--by token|word|sentence|spans FILE``) means: the units that ablated flow
removes at once, as groups of token positions, and their scores spread back over the tokens.

``spans`` is one of:

- ``None`` or ``"token"``: every token alone (ablated flow as it always was);
- ``"word"`` / ``"sentence"``: from the tokenizer's character offsets
  (:mod:`attnflow.capture.segments`; no sentence splitter, no downloaded data);
- a list of passages of the text (strings, found in order) or of character ranges ``(start, end)``:
  each is one unit, and the tokens between them form units of their own runs;
- a path to a text file (the CLI's ``--by spans --spans FILE``): one passage per line, as above.

Which methods ablate by span is their registry record's ``spans`` fact (ablated flow, its estimate,
the budgeted chooser); the others score tokens as always.

A span's score is what the prediction loses when all of its tokens are ablated together; every token
of the span carries it, and ``result.meta["spans"]`` lists the groups and ``meta["span_labels"]`` their
text (so views can group tokens by span and a ranking counts each span once).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.capture.segments import UNITS, char_spans, segments
from attnflow.errors import AttnflowError

BY = ("token", *UNITS, "spans")


def _passages(text: str, passages: Sequence[str]) -> list[tuple[int, int]]:
    """Character ranges of ``passages`` found in ``text`` in order, each after the previous one."""
    ranges, at = [], 0
    for passage in passages:
        passage = passage.strip()
        if not passage:
            continue
        start = text.find(passage, at)
        if start < 0:
            raise AttnflowError(f"the span {passage[:40]!r} is not in the text (after character {at}); each span "
                                "must be a passage of the text, in order")
        ranges.append((start, start + len(passage)))
        at = start + len(passage)
    return ranges


def token_groups(spans: Any, text: str, offsets: Sequence[Sequence[int]] | None, n: int) -> list[list[int]] | None:
    """The groups of token positions that ``spans`` names (see the module docstring); None for tokens."""
    if spans is None or (isinstance(spans, str) and spans == "token"):
        return None
    if isinstance(spans, Path) or (isinstance(spans, str) and spans not in UNITS):
        path = Path(spans)
        if not path.is_file():
            raise AttnflowError(f"spans must be 'token', 'word', 'sentence', a list of passages or character ranges, "
                                f"or a file of passages (one per line); got {spans!r}")
        spans = path.read_text(encoding="utf-8").splitlines()
    if offsets is None or len(offsets) != n:
        raise AttnflowError("spans other than 'token' need the tokenizer's character offsets (a fast tokenizer)")
    if isinstance(spans, str):
        return segments(text, offsets, spans)
    items = list(spans)
    if all(isinstance(s, str) for s in items):
        return char_spans(text, offsets, _passages(text, items))
    return char_spans(text, offsets, [tuple(np.asarray(s).tolist()) for s in items])


def groups_for(spans: Any, text: str, tokenizer: Any, n: int) -> tuple[list[list[int]], list[str]] | None:
    """:func:`token_groups` for ``text`` as ``tokenizer`` splits it into the ``n`` captured tokens, with
    each group's text (what its tokens cover; a special token's own string)."""
    if spans is None or (isinstance(spans, str) and spans == "token"):
        return None
    try:
        encoded = tokenizer(text, return_offsets_mapping=True)
        offsets = encoded["offset_mapping"]
    except (NotImplementedError, TypeError, ValueError, KeyError):
        offsets = None
    groups = token_groups(spans, text, offsets, n)
    labels = []
    for group in groups:
        covered = [offsets[j] for j in group if offsets[j][1] > offsets[j][0]]
        labels.append(" ".join(text[covered[0][0]:covered[-1][1]].split()) if covered
                      else tokenizer.convert_ids_to_tokens(encoded["input_ids"][group[0]]))
    return groups, labels


def spread(span_scores: np.ndarray, groups: list[list[int]], n: int) -> np.ndarray:
    """``(..., len(groups))`` -> ``(..., n)``: each token carries its span's score."""
    out = np.zeros((*span_scores.shape[:-1], n))
    for s, group in enumerate(groups):
        out[..., group] = span_scores[..., s:s + 1]
    return out
