"""The view of a result explained by span: its spans ranked, each span's text on one line.

A result computed with ``spans=`` (``attnflow.units.spans``) keeps the groups of token positions in
``meta["spans"]`` (their text in ``meta["span_labels"]``) and the methods that scored them in
``meta["span_methods"]``; every token of a span
carries the span's score, so a token ranking would list a sentence's tokens one after another. This
view lists each span once, with what the budgeted method did to it when it ran ("exact" or
"estimate").
"""

from __future__ import annotations

from typing import Any

import numpy as np

_MARKERS = {"\u0120": " ", "\u010a": " ", "\u2581": " "}  # GPT-2 BPE space and newline, sentencepiece space


def span_text(result: Any, s: int, limit: int = 70) -> str:
    """Span ``s``'s text (``meta["span_labels"]``; else its tokens joined, BPE space markers read as
    spaces), cut at ``limit`` characters."""
    labels = (result.meta or {}).get("span_labels")
    if labels is not None:
        text = str(labels[s])
    else:
        text = "".join(str(result.sources[j]) for j in result.meta["spans"][s])
        for marker, space in _MARKERS.items():
            text = text.replace(marker, space)
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def span_rows(result: Any, method: str, k: int = 5) -> list[tuple[float, str, str]]:
    """The ``k`` highest-scoring spans of ``method`` for the explained target: ``(score, text, how)``."""
    groups = (result.meta or {}).get("spans") or []
    scores = result.layer_scores(method, None, -1)
    exact = ((result.meta or {}).get(method) or {}).get("exact")
    values = np.array([scores[g[0]] for g in groups])
    rows = []
    for s in np.argsort(-values, kind="stable")[:k]:
        how = "" if exact is None else ("exact" if exact[s] else "estimate")
        rows.append((float(values[s]), span_text(result, int(s)), how))
    return rows


def span_lines(result: Any, k: int = 5) -> list[str]:
    """One block per span-scored method: a header, then ``score  text  [how]`` per top span."""
    lines = []
    for method in (result.meta or {}).get("span_methods") or []:
        if method not in result.methods:
            continue
        lines.append(f"{method}, top {k} of {len((result.meta or {}).get('spans') or [])} spans:")
        for score, text, how in span_rows(result, method, k):
            lines.append(f"  {score:+.3f}  {text}" + (f"  [{how}]" if how else ""))
    return lines
