"""Which method finds the evidence token in a decoder? A small templated study on SmolLM2-135M.

    PYTHONPATH=src python benchmarks/decoder_study.py [--per-task 48] [--markdown]

Two templated tasks with a known evidence token (no such datasets install from PyPI):

- agreement: "{prefix} the {subject} {prep} the {attractor}" -> " are"/" is"; evidence: the subject
  noun (the attractor has the other number and is the target position itself, so it is out of the
  ranking);
- pronoun: "{prefix} {A} asked {B} to return {her/his} {thing}. {He/She} said {he/she} would give it
  back to" -> " her"/" him"; evidence: the owner's name {A} and the possessive {her/his}.

For each prompt the target is the last position (it predicts the next token). Every method ranks the
prompt tokens other than the target and the first token (SmolLM2 adds no BOS; its first token is where
heads park attention, the role BOS plays elsewhere). A hit = the top-ranked token is evidence; the
rank is that of the best-ranked evidence token.
Methods: raw attention, rollout and flow at the top layer (head mean, residual 0.5), each without and
with receptive-field normalisation ("keys", "sink"; see attnflow.core.causal); input gradients of the
predicted token's logit w.r.t. the input embeddings, as the L2 norm per token ("grad L2") and as
|sum over dimensions of gradient x embedding| ("grad x input"). "chance" = expected hit rate of a random
ranking; "earliest"/"latest" rank by position alone (the first/last candidate), to show how much of
a method's hit rate position explains. Only prompts where the model prefers the right continuation over the wrong one are scored.
"""

from __future__ import annotations

import argparse
import itertools
import random

import numpy as np
import torch

import attnflow
from attnflow.capture.load import quiet_transformers
from attnflow.capture.pypi_models import smollm2_path

SUBJECTS = [("key", "keys"), ("book", "books"), ("door", "doors"), ("letter", "letters"), ("picture", "pictures"),
            ("bottle", "bottles"), ("window", "windows"), ("label", "labels")]
ATTRACTORS = [("cabinet", "cabinets"), ("shelf", "shelves"), ("table", "tables"), ("house", "houses"),
              ("drawer", "drawers"), ("garden", "gardens")]
PREPS = ["to", "on", "near", "of"]
# Prefixes put the evidence at varying positions: without them it always sits right after the first
# token, where rollout piles up mass whatever the input (see "earliest" in the table).
AGREEMENT_PREFIXES = ["I think that the", "She said that the", "We know that the", "In the old house the",
                      "Everyone agrees that the", "He told me that the"]
PRONOUN_PREFIXES = ["In class,", "After lunch,", "On Monday morning,", "Last week at school,", "During the break,"]
WOMEN = ["Sara", "Mary", "Emma", "Anna", "Lucy", "Kate"]
MEN = ["John", "Tom", "Peter", "David", "Mark", "James"]
THINGS = ["book", "pen", "bike", "umbrella", "laptop", "scarf"]


def agreement_items(rng: random.Random, k: int) -> list[dict]:
    items = []
    for (s_sg, s_pl), (a_sg, a_pl), prep, prefix in itertools.product(SUBJECTS, ATTRACTORS, PREPS, AGREEMENT_PREFIXES):
        for plural in (True, False):
            subj, attr = (s_pl, a_sg) if plural else (s_sg, a_pl)
            head = prefix + " "
            items.append({"task": "agreement", "prompt": f"{head}{subj} {prep} the {attr}",
                          "evidence": [(len(head), len(head) + len(subj))],
                          "right": " are" if plural else " is", "wrong": " is" if plural else " are"})
    return rng.sample(items, k)


def pronoun_items(rng: random.Random, k: int) -> list[dict]:
    items = []
    for woman, man, thing, prefix in itertools.product(WOMEN, MEN, THINGS, PRONOUN_PREFIXES):
        for owner_is_woman in (True, False):
            a, b = (woman, man) if owner_is_woman else (man, woman)
            poss, subj = ("her", "He") if owner_is_woman else ("his", "She")
            head = prefix + " "
            prompt = f"{head}{a} asked {b} to return {poss} {thing}. {subj} said {subj.lower()} would give it back to"
            p = prompt.index(f" {poss} ") + 1
            items.append({"task": "pronoun", "prompt": prompt,
                          "evidence": [(len(head), len(head) + len(a)), (p, p + len(poss))],
                          "right": " her" if owner_is_woman else " him", "wrong": " him" if owner_is_woman else " her"})
    return rng.sample(items, k)


def score_item(model, tokenizer, item: dict) -> dict | None:
    enc = tokenizer(item["prompt"], return_offsets_mapping=True)
    ids = torch.tensor([enc["input_ids"]])
    n = ids.shape[1]
    emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    out = model(inputs_embeds=emb, output_attentions=True)
    logits = out.logits[0, -1]
    right, wrong = (tokenizer(item[k])["input_ids"][0] for k in ("right", "wrong"))
    if logits[right] <= logits[wrong]:
        return None
    logits[int(logits.argmax())].backward()
    grad = emb.grad[0]
    attentions = tuple(a.detach() for a in out.attentions)
    evidence = np.array([any(s < e1 and e0 < e for e0, e1 in item["evidence"]) for s, e in enc["offset_mapping"]])
    candidates = np.ones(n, dtype=bool)
    candidates[[0, n - 1]] = False
    position = np.arange(n, dtype=float)
    scores = {"earliest": -position, "latest": position, "grad L2": grad.norm(dim=-1).numpy(), "grad x input": (grad * emb[0]).sum(-1).abs().detach().numpy()}
    for norm in (None, "keys", "sink"):
        tag = "" if norm is None else f" +{norm}"
        scores["raw" + tag] = np.asarray(attnflow.raw(attentions, causal_norm=norm))[-1, -1]
        scores["rollout" + tag] = np.asarray(attnflow.rollout(attentions, causal_norm=norm))[-1, -1]
        scores["flow" + tag] = np.asarray(attnflow.flow(attentions, causal_norm=norm, positions=[-1], layers=[-1]))[0, 0]
    ev, cand = evidence & candidates, candidates
    result = {}
    for name, s in scores.items():
        best = s[ev].max()  # rank of the best evidence token among the candidates (1 = first)
        result[name] = (bool(evidence[np.flatnonzero(cand)[np.argmax(s[cand])]]), 1 + int((s[cand] > best).sum()))
    k, c = int(ev.sum()), int(cand.sum())
    # A random ranking: hit rate k/c; expected rank of the best of k evidence tokens among c is (c+1)/(k+1).
    result["chance"] = (k / c, (c + 1) / (k + 1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-task", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quiet_transformers()
    model, tokenizer = attnflow.load_model(smollm2_path())
    rng = random.Random(args.seed)
    tasks = {"agreement": agreement_items(rng, args.per_task), "pronoun": pronoun_items(rng, args.per_task)}
    results: dict[str, list[dict]] = {}
    for task, items in tasks.items():
        results[task] = [h for h in (score_item(model, tokenizer, it) for it in items) if h is not None]
    names = list(results["agreement"][0])
    print("top-1 = share of prompts whose top-ranked token (target and first token excluded) is evidence;")
    print("rank = mean rank of the best evidence token (1 = first); n = prompts the model gets right / generated.")
    columns = [f"{t} top-1 (n={len(r)}/{len(tasks[t])})" for t, r in results.items()]
    columns += [f"{t} rank" for t in results]
    print(f"| {'method':<16} | " + " | ".join(columns) + " |")
    print(f"|{'-' * 18}|" + "|".join("-" * (len(c) + 2) for c in columns) + "|")
    for name in names:
        values = [np.mean([h[name][0] for h in r]) for r in results.values()]
        values += [np.mean([h[name][1] for h in r]) for r in results.values()]
        cells = [f"{v:.2f}".center(len(c)) for v, c in zip(values, columns)]
        print(f"| {name:<16} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
