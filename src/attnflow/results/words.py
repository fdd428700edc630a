"""Which tokens count as content when ranking: rollout and raw attention favour punctuation, very
common words and the first token (where heads park attention), whatever the input says.

A token is left out when, stripped of spaces and BPE markers and lower-cased, it is empty, made only
of punctuation/symbols, or one of the ~60 most common English function words below.
"""

from __future__ import annotations

import string

COMMON_WORDS = frozenset("""
a an the and or but if of to in on at by for with from as into onto about than then so that this these
those it its is are was were be been being am do does did has have had i you he she we they me him her
us them my your his our their what which who whom not no yes
""".split())

_STRIP = " \t\n\u0120\u010a\u2581"  # spaces, GPT-2 BPE markers (Ġ, Ċ) and sentencepiece's ▁


def is_content(token: str) -> bool:
    word = token.strip(_STRIP).lower()
    if not word or all(ch in string.punctuation or not ch.isalnum() for ch in word):
        return False
    return word not in COMMON_WORDS
