"""A templated subject-verb agreement corpus, standing in for Linzen et al. (2016).

Each example is an English sentence prefix that stops right before the main verb, labelled with the
number the verb must take: ``0 = "singular"`` ("the key to the cabinets" -> *is*), ``1 = "plural"``.

Grammar (``?`` = optional, ``ADJ*`` = 0-2 adjectives, every noun's number drawn independently)::

    S      -> PREFIX? NP_subj
    PREFIX -> PRON THINK "that"                  "they say that", "she thinks that"
    NP     -> DET ADJ* N                          "the old key", "these keys"
    PP     -> PREP NP                             "to the cabinets"
    ORC    -> "that" NP V_trans(NP)               "that the critics praise"   (object relative)
    SRC    -> "that" V_trans(head) NP             "that praises the critics"  (subject relative)

Templates (what follows the subject noun; modifiers attach to the noun just before them)::

    bare      NP                    pp        NP PP              pp2    NP PP PP
    orc       NP ORC                src       NP SRC             pp_orc NP PP ORC
    orc_pp    NP that NP PP V       src_pp    NP SRC PP
    unseen:   pp3  NP PP PP PP      pp_src    NP PP SRC  (its verb agrees with the PP's noun)

An *attractor* is a noun between the subject and the verb whose number differs from the subject's
(Linzen et al.'s definition). Number-marked determiners ("a"/"this" vs "some"/"these") and the
relative-clause verbs are number cues too, as in natural text.

Everything is drawn from a ``random.Random(seed)``: the same seed gives the same splits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from attnflow.data.agreement_lexicon import ADJECTIVES, NOUNS, PREFIXES, PREPOSITIONS, VERBS
from attnflow.errors import AttnflowError

LABELS = {0: "singular", 1: "plural"}
SEEN_TEMPLATES = ("bare", "pp", "pp2", "orc", "src", "pp_orc", "orc_pp", "src_pp")
UNSEEN_TEMPLATES = ("pp3", "pp_src")
DEFAULT_SIZES = {"train": 40000, "validation": 2000, "test": 5000, "unseen": 2000}


@dataclass(frozen=True)
class Example:
    """One sentence prefix; ``label`` 0 = singular, 1 = plural verb; ``subject`` = word index."""

    text: str
    label: int
    template: str
    attractors: int
    subject: int


class _Builder:
    """Builds one sentence left to right, remembering nouns' numbers for attractor counting."""

    def __init__(self, rng: random.Random, plural: bool):
        self.rng, self.words, self.plural = rng, [], plural
        self.subject = -1
        self.attractors = 0

    def number(self) -> bool:
        return self.rng.random() < 0.5

    def np(self, plural: bool, subject: bool = False) -> None:
        det = self.rng.choice(["the", "the", "some", "these"] if plural else ["the", "the", "a", "this"])
        adjectives = [self.rng.choice(ADJECTIVES) for _ in range(self.rng.choice([0, 0, 0, 1, 1, 2, 3]))]
        phrase = [det, *adjectives, self.rng.choice(NOUNS)[int(plural)]]
        if det == "a" and phrase[1][0] in "aeiou":
            phrase[0] = "an"
        self.words += phrase
        if subject:
            self.subject = len(self.words) - 1
        elif plural != self.plural:
            self.attractors += 1

    def pp(self) -> bool:
        self.words.append(self.rng.choice(PREPOSITIONS))
        plural = self.number()
        self.np(plural)
        return plural

    def verb(self, plural: bool) -> None:
        self.words.append(self.rng.choice(VERBS)[int(plural)])


def _sentence(rng: random.Random, template: str, plural: bool) -> Example:
    b = _Builder(rng, plural)
    if rng.random() < 0.25:
        pron, verbs = rng.choice(PREFIXES)
        b.words += [pron, rng.choice(verbs), "that"]
    b.np(plural, subject=True)
    head = plural  # number of the noun the next modifier attaches to
    parts = {"bare": [], "orc_pp": ["orc+pp"]}.get(template, template.split("_"))
    for part in parts:
        if part.startswith("pp"):
            for _ in range(int(part[2:] or 1)):
                head = b.pp()
        elif part.startswith("orc"):
            b.words.append("that")
            inner = b.number()
            b.np(inner)
            if part == "orc+pp":  # the PP modifies the relative clause's own subject
                b.pp()
            b.verb(inner)
        elif part == "src":
            b.words.append("that")
            b.verb(head)
            b.np(b.number())
        else:
            raise AttnflowError(f"unknown template {template!r}; expected one of {SEEN_TEMPLATES + UNSEEN_TEMPLATES}")
    return Example(" ".join(b.words), int(plural), template, b.attractors, b.subject)


def generate(n: int, templates: tuple[str, ...], rng: random.Random, exclude: set[str]) -> list[Example]:
    """``n`` distinct examples, exactly half plural (n even), templates in turn, none in ``exclude``."""
    out: list[Example] = []
    seen = set(exclude)
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise AttnflowError(f"could not draw {n} distinct sentences; ask for fewer examples")
        i = len(out)
        template = templates[(i // 2) % len(templates)]
        ex = _sentence(rng, template, plural=bool(i % 2))
        if ex.text not in seen:
            seen.add(ex.text)
            out.append(ex)
    rng.shuffle(out)
    return out


def splits(seed: int = 0, sizes: dict[str, int] | None = None) -> dict[str, list[Example]]:
    """Disjoint ``train`` / ``validation`` / ``test`` (seen templates) and ``unseen`` (held-out templates)."""
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    if any(v < 0 or v % 2 for v in sizes.values()):
        raise AttnflowError(f"split sizes must be even, non-negative integers (for exact label balance); got {sizes}")
    rng = random.Random(seed)
    out: dict[str, list[Example]] = {}
    used: set[str] = set()
    # Test sets are drawn first so that train can never contain a test sentence.
    for name in ("test", "unseen", "validation", "train"):
        templates = UNSEEN_TEMPLATES if name == "unseen" else SEEN_TEMPLATES
        out[name] = generate(sizes[name], templates, rng, used)
        used.update(e.text for e in out[name])
    return {k: out[k] for k in ("train", "validation", "test", "unseen")}


def vocabulary() -> list[str]:
    """Every word the grammar can emit, sorted (the tokenizer's word list)."""
    words = {"the", "a", "an", "this", "some", "these", "that"} | set(ADJECTIVES) | set(PREPOSITIONS)
    for pair in NOUNS + VERBS:
        words.update(pair)
    for pron, verbs in PREFIXES:
        words.add(pron)
        words.update(verbs)
    return sorted(words)
