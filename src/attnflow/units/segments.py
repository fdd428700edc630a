"""Words and sentences of a text as groups of its tokens, read from the tokenizer's character offsets
(no sentence splitter, no downloaded data).

A fast tokenizer gives each token the characters ``[start, end)`` of the text it came from. The text
is cut into words (a run of letters and digits, apostrophes inside a word kept: ``don't``; each other
non-space character alone) or sentences (up to and including a run of ``.``, ``!`` or ``?`` followed by
white space or the end, and at every line break, so that a chat turn or a line of code is one unit),
and each token joins the unit that holds its first non-space character. A token of white space
only joins the unit before it (or starts one, at the start or after a special token); a token with no characters (a special token
such as ``<s>``, offsets ``(0, 0)``) is a unit of its own. The units are consecutive runs of tokens
and partition the sequence.

API::

    segments(text, offsets, by="word" | "sentence") -> list[list[int]]   # token positions per unit
    char_spans(text, offsets, ranges) -> list[list[int]]                # given character ranges
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

from attnflow.errors import AttnflowError

UNITS = ("word", "sentence")
_WORD = re.compile(r"\w+(?:['\u2019]\w+)*|[^\w\s]")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|\n")


def _units(text: str, by: str) -> list[tuple[int, int]]:
    """Character ranges ``[start, end)`` of the text's words or sentences, in order."""
    if by == "word":
        return [m.span() for m in _WORD.finditer(text)]
    cuts, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if text[start:m.end()].strip():
            cuts.append((start, m.end()))
            start = m.end()
    if text[start:].strip():
        cuts.append((start, len(text)))
    return cuts


def _assign(text: str, offsets: Sequence[Sequence[int]], ranges: list[tuple[int, int]]) -> list[list[int]]:
    """Group tokens by the range holding their first non-space character (see the module docstring)."""
    starts = [s for s, _ in ranges]
    groups: list[list[int]] = []
    unit_of_group: list[object] = []
    for i, (s, e) in enumerate((int(a), int(b)) for a, b in offsets):
        if e <= s:
            key: object = ("special", i)
        else:
            p = s
            while p < e and text[p].isspace():
                p += 1
            if p == e:  # white space only: stays with the unit before (a unit of its own after a special token)
                before = unit_of_group[-1] if unit_of_group else None
                key = ("space", i) if before is None or (isinstance(before, tuple) and before[0] == "special") \
                    else before
            else:
                u = bisect_right(starts, p) - 1
                key = u if u >= 0 and p < ranges[u][1] else ("outside", u)
        if unit_of_group and unit_of_group[-1] == key:
            groups[-1].append(i)
        else:
            groups.append([i])
            unit_of_group.append(key)
    return groups


def segments(text: str, offsets: Sequence[Sequence[int]], by: str = "word") -> list[list[int]]:
    """The token positions of each word or sentence of ``text`` (see the module docstring).

    offsets: per token its ``(start, end)`` characters in ``text``, as a fast tokenizer returns with
    ``return_offsets_mapping=True``. by: ``"word"`` or ``"sentence"``."""
    if by not in UNITS:
        raise AttnflowError(f"by must be one of {', '.join(UNITS)}; got {by!r}")
    return _assign(text, offsets, _units(text, by))


def char_spans(text: str, offsets: Sequence[Sequence[int]], ranges: Sequence[Sequence[int]]) -> list[list[int]]:
    """Token groups for user-given character ranges ``[start, end)`` of ``text`` (not overlapping);
    tokens outside every range form units of their own runs between them."""
    clean = sorted((int(a), int(b)) for a, b in ranges)
    if any(not 0 <= a < b <= len(text) for a, b in clean) or any(b > c for (_, b), (c, _) in zip(clean, clean[1:])):
        raise AttnflowError(f"spans must be non-overlapping character ranges [start, end) within the text's "
                            f"{len(text)} characters; got {list(ranges)}")
    return _assign(text, offsets, clean)
