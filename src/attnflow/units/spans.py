"""What ``spans=`` (CLI ``--by token|word|sentence|spans FILE``) means: the units that ablated flow
removes at once, as groups of token positions, and their scores spread back over the tokens.

``spans`` is one of:

- ``None`` or ``"token"``: every token alone (ablated flow as it always was);
- ``"word"`` / ``"sentence"``: from the tokenizer's character offsets
  (``attnflow.units.segments``; no sentence splitter, no downloaded data);
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

import numbers
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.units.segments import UNITS, char_spans, segments
from attnflow.errors import AttnflowError

BY = ("token", *UNITS, "spans")


WHAT = ("spans must be 'token', 'word', 'sentence', a list of passages of the text (strings), a list of character "
        "ranges (start, end) (integers), or a text file of passages, one per line")


def _read(path: Path) -> list[str]:
    """The passages of a spans file, one per line (blank lines left out), or a one-line refusal."""
    if path.is_dir():
        raise AttnflowError(f"{str(path)!r} is a folder; spans (--spans) takes a text file of passages of the text, "
                            "one per line")
    if not path.is_file():
        raise AttnflowError(f"no such file: {str(path)!r}; spans (--spans) takes a text file of passages of the text, "
                            "one per line")
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise AttnflowError(f"{str(path)!r} is not a UTF-8 text file; spans (--spans) takes a text file of passages "
                            "of the text, one per line") from None
    except OSError as exc:
        raise AttnflowError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise AttnflowError(f"{str(path)!r} holds no passage (it is empty or blank); write one passage of the text "
                            "per line, or use --by word / --by sentence")
    return lines


def checked_spans(spans: Any) -> Any:
    """``spans`` as the entry points take it, checked before any work (no text or tokenizer needed): None,
    "token", "word", "sentence", a list of passages (a file's lines, read here once) or of integer
    character ranges. Refused in one line: an empty or blank list or file, a folder, a binary file, a
    number, a range that is not two integers, passages mixed with ranges."""
    if spans is None or (isinstance(spans, str) and spans in ("token", *UNITS)):
        return spans
    if isinstance(spans, (str, os.PathLike)):
        return _read(Path(spans))
    if isinstance(spans, (bytes, dict, numbers.Number)) or not isinstance(spans, (Sequence, np.ndarray)):
        raise AttnflowError(f"{WHAT}; got {type(spans).__name__}")
    items = list(spans)
    if not items:
        raise AttnflowError(f"spans=[] names no span; {WHAT} (None: every token alone)")
    if all(isinstance(s, str) for s in items):
        if not any(s.strip() for s in items):
            raise AttnflowError("every passage given as spans is blank; give passages of the text")
        return items
    for item in items:
        pair = item if isinstance(item, (Sequence, np.ndarray)) and not isinstance(item, str) else None
        if pair is None or len(pair) != 2 or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral)
                                                 for v in pair):
            kind = ("passages mixed with ranges" if any(isinstance(s, str) for s in items)
                    else f"got {item!r:.40}: a character range is two integers (start, end)")
            raise AttnflowError(f"{WHAT}; {kind}")
    return [(int(a), int(b)) for a, b in items]


def _passages(text: str, passages: Sequence[str]) -> list[tuple[int, int]]:
    """Character ranges of ``passages`` found in ``text`` in order, each after the previous one."""
    ranges, at = [], 0
    for passage in passages:
        passage = passage.strip()
        if not passage:
            continue
        start = text.find(passage, at)
        if start < 0:
            earlier = text.find(passage)
            if 0 <= earlier < at:
                raise AttnflowError(f"the span {passage[:40]!r} overlaps the span before it or comes before it in the "
                                    f"text (it starts at character {earlier}, the previous one ends at {at}); spans "
                                    "must be passages of the text that do not overlap, in order")
            raise AttnflowError(f"the span {passage[:40]!r} is not in the text (after character {at}); each span "
                                "must be a passage of the text, in order")
        ranges.append((start, start + len(passage)))
        at = start + len(passage)
    return ranges


def token_groups(spans: Any, text: str, offsets: Sequence[Sequence[int]] | None, n: int) -> list[list[int]] | None:
    """The groups of token positions that ``spans`` names (see the module docstring); None for tokens."""
    spans = checked_spans(spans)
    if spans is None or (isinstance(spans, str) and spans == "token"):
        return None
    if offsets is None or len(offsets) != n:
        raise AttnflowError("spans other than 'token' need the tokenizer's character offsets (a fast tokenizer)")
    if isinstance(spans, str):
        return segments(text, offsets, spans)
    items = list(spans)
    if all(isinstance(s, str) for s in items):
        return char_spans(text, offsets, _passages(text, items))
    return char_spans(text, offsets, items)


def groups_for(spans: Any, text: str, tokenizer: Any, n: int) -> tuple[list[list[int]], list[str]] | None:
    """``token_groups`` for ``text`` as ``tokenizer`` splits it into the ``n`` captured tokens, with
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
