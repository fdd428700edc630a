"""Which estimator of ablated flow agrees best with the exact one, at what price: an experiment harness.

    PYTHONPATH=src nice -n 10 python benchmarks/estimators.py [--cache DIR] [--short 15] [--out FILE.json]

SmolLM2-135M, one torch thread. Exact ablated flow (value zeroing of source j in every layer; the
logit drop at the last position) and deletion leave-one-out are computed once per prompt and cached
on disk (``--cache``, outside git). Every candidate is compared with exact ablated flow on positions
1 .. n-2 (as ``benchmarks/one_pass.py``): Spearman rho and top-10 recall (``min(10, n / 3)``), by
length band, with its cost in passes (token positions run / n; a backward pass counted as one pass).

Prompts: the first ``--short`` prompts of 8-24 tokens of ``benchmarks/decoder_prompts.py`` and long
ones (150-300 tokens): the three of ``benchmarks/one_pass.py`` (a retrieved-document question, a chat
history, a code snippet) and three more kinds (a longer document, a story with a coreference, a
list lookup).

Candidates (see ``docs/one-pass.md`` for what each is and what it measured):

- ``first-order``: attribution patching, ``sum_l grad_{v[l,j]} z . v[l,j]`` at the clean run (2 passes).
- ``ig-all-K``: integrated gradients along the path that scales every source's values (but the
  first token's, the attention sink) by ``alpha``, K midpoints (2K passes).
- ``grad-at-a``: the first order taken at ``alpha`` on that path (2 passes).
- ``suffix-w``: exact for the last ``w`` positions, which are re-run with ``j``'s values zeroed in the
  clean key/value cache of every layer (so ``j`` reaches them only directly through attention, not
  through the positions between): about ``w`` passes of positions for every source, 1 clean.
- ``suffix-w+indirect``: ``suffix-w`` plus the first order of the indirect paths (the first order
  minus its part through the direct paths into the last ``w`` positions; 2 more passes).
- ``budgeted-5-tailT``: ``attnflow.interventions.budgeted`` within 5 passes, the share ``T`` of the
  refinement budget spent on the latest sources first (0: the estimate's top only).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_prompts import prompts  # noqa: E402
from one_pass import CODE, chat, document, recall  # noqa: E402

from attnflow.interventions.ablation import ablated_flow, occlusion  # noqa: E402
from attnflow.interventions.attribution_patching import attribution_patching  # noqa: E402
from attnflow.interventions.budgeted import budgeted_ablated_flow  # noqa: E402
from attnflow.evaluation.correlation import spearman  # noqa: E402

STORY = ("Anna and her brother Leo spent the summer at their grandmother's farm. Every morning Leo fed the chickens "
         "while Anna milked the two goats, Bella and Rosa. One afternoon a storm broke the fence behind the barn, and "
         "the goats ran into the forest. Leo searched the river bank and the old mill, but he found nothing. Anna took "
         "a lantern and walked along the path to the hill, calling their names. After an hour she heard a bell: Rosa "
         "was standing under a tree, and Bella was eating flowers a few steps away. When they came back, their "
         "grandmother made hot soup and told them that the fence would be repaired by the neighbour. The next day the "
         "neighbour arrived with wood and nails. Leo helped him carry the planks, and the work was done before lunch. "
         "In the evening the grandmother asked who had found the goats, and Leo pointed at")
LIST = ("Inventory of the warehouse, aisle by aisle.\n" + "\n".join(
    f"Aisle {i}: {a} boxes of {b}, checked by {c}." for i, (a, b, c) in enumerate(zip(
        [12, 7, 30, 4, 18, 9, 25, 3, 14, 21, 6, 11],
        ["nails", "screws", "paint", "glue", "tiles", "rope", "wire", "tape", "bolts", "hinges", "brushes", "gloves"],
        ["Maria", "Tom", "Lena", "Omar", "Kim", "Ivan", "Sofia", "Paul", "Nora", "Ali", "Eva", "Ben"]), start=1))
    + "\nQuestion: how many boxes of wire are there? Answer: There are")


def texts(short: int) -> list[tuple[str, str]]:
    rng = random.Random(0)
    shorts = [p["prompt"] for p in prompts()]
    out = [("short", t) for t in shorts]
    out = out[:short * 3]  # filtered by length below
    longs = [document(rng, 8, 8)[0], chat(rng, 4), CODE]
    rng2 = random.Random(7)
    longs += [document(rng2, 12, 14)[0], STORY, LIST]
    return out + [("long", t) for t in longs]


# ----------------------------------------------------------------------- value scaling with a gradient

class Scaler:
    """Hooks on every layer's value projection: output * s[j] (one scale per position, shared by every
    layer), ``s`` a leaf of autograd so that d z / d s_j = sum_l grad_{v[l,j]} z . v[l,j] at the scaled point."""

    def __init__(self, model):
        self.s = None
        for layer in model.model.layers:
            layer.self_attn.v_proj.register_forward_hook(self.hook)

    def hook(self, module, args, output):
        if self.s is None:
            return None
        return output * self.s[None, :, None].to(output.dtype)


class Direct:
    """Hooks on every decoder layer's output: while ``start`` is set, positions before it are cut from
    autograd, so that a gradient reaches a source's values only through the positions from ``start``
    on reading them by attention (the direct paths into the last positions), not through the positions
    between."""

    def __init__(self, model):
        self.start = None
        for layer in model.model.layers:
            layer.register_forward_hook(self.hook)

    def hook(self, module, args, output):
        if self.start is None:
            return None
        h = output[0] if isinstance(output, tuple) else output
        cut = torch.cat([h[:, :self.start].detach(), h[:, self.start:]], 1)
        return (cut,) + tuple(output[1:]) if isinstance(output, tuple) else cut


def grad_at(model, scaler, ids, token, s):
    s = torch.as_tensor(s, dtype=torch.float32).clone().requires_grad_(True)
    scaler.s = s
    try:
        with torch.enable_grad():
            out = model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1)
            z = out.logits[0, -1, token]
            (g,) = torch.autograd.grad(z, s)
    finally:
        scaler.s = None
    return g.double().numpy(), float(z)


# ----------------------------------------------------------------------- suffix re-runs from a clean cache

def suffix_scores(model, ids, token, w, sources, batch=16):
    """For each source j < n - w: the clean cache of [0, n - w) with j's values zeroed in every layer,
    then positions [n - w, n) re-run (their own values computed, j's stay zero); the logit drop at n-1.
    Sources j >= n - w are ablated exactly (the window covers every position j reaches)."""
    from transformers import DynamicCache

    n = len(ids)
    start = n - w
    x = torch.tensor([ids])
    out = np.zeros(n)
    with torch.no_grad():
        clean_cache = DynamicCache(config=model.config)
        model(input_ids=x[:, :start], use_cache=True, past_key_values=clean_cache)
        tail = model(input_ids=x[:, start:], use_cache=False, past_key_values=copy.deepcopy(clean_cache)).logits
        z0 = float(tail[0, -1, token])
        early = [j for j in sources if j < start]
        for b0 in range(0, len(early), batch):
            chunk = early[b0:b0 + batch]
            cache = copy.deepcopy(clean_cache)
            cache.batch_repeat_interleave(len(chunk))
            for layer in cache.layers:
                for r, j in enumerate(chunk):
                    layer.values[r, :, j] = 0
            logits = model(input_ids=x[:, start:].expand(len(chunk), -1), past_key_values=cache, use_cache=True,
                           logits_to_keep=1).logits
            out[chunk] = z0 - logits[:, -1, token].double().numpy()
    late = [j for j in sources if j >= start]
    return out, late


def add_candidates(model, scaler, direct, ids, token, exact, cands):
    """The one-pass and few-pass candidates other than the first order (see the module docstring)."""
    n = len(ids)
    first = cands["first-order"][0]
    ones = np.ones(n)
    for a in (0.5, 0.75, 0.9):
        s = ones * a
        s[0] = 1
        cands[f"grad-at-{a}"] = (grad_at(model, scaler, ids, token, s)[0], 2)
    for k in (2, 4):
        acc = np.zeros(n)
        for i in range(k):
            s = ones * (i + 0.5) / k
            s[0] = 1
            acc += grad_at(model, scaler, ids, token, s)[0] / k
        cands[f"ig-all-{k}"] = (acc, 2 * k)
    for w in (1, 2, 4):
        if w < n - 2:
            sc, late = suffix_scores(model, ids, token, w, list(range(n)))
            sc[late] = exact[late]  # the window's own sources: exact (their runs cost ~w^2/2 positions)
            cands[f"suffix-{w}"] = (sc, 1 + w)
            direct.start = n - w  # the first order through the direct paths into the last w positions
            try:
                through = grad_at(model, scaler, ids, token, ones)[0]
            finally:
                direct.start = None
            through[late] = first[late]
            cands[f"suffix-{w}+indirect"] = (sc + first - through, 3 + w)


def cached(path: Path, fn):
    if path.exists():
        return np.load(path)
    value = fn()
    np.save(path, value)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", default="/work/cache-est")
    parser.add_argument("--short", type=int, default=15)
    parser.add_argument("--only", default=None, choices=["budgeted"], help="only the first order and the chooser")
    parser.add_argument("--tails", default="0,0.5,0.75,1", help="the chooser's tail shares to run (comma-separated)")
    parser.add_argument("--long-only", action="store_true", help="only the long prompts")
    parser.add_argument("--cached-only", action="store_true", help="only prompts whose exact scores are cached")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.tails = [float(t) for t in args.tails.split(",")]
    torch.set_num_threads(1)
    from attnflow.hf.load import load_model, quiet_transformers
    from attnflow.hf.pypi_models import smollm2_path

    quiet_transformers()
    model, tok = load_model(smollm2_path())
    scaler = Scaler(model)
    direct = Direct(model)
    cache_dir = Path(args.cache)
    cache_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    n_short = n_long = 0
    for kind, text in texts(args.short):
        ids = tok(text)["input_ids"]
        n = len(ids)
        if kind == "short":
            if args.long_only or not 8 <= n <= 24 or n_short >= args.short:
                continue
            n_short += 1
        key = hashlib.sha1(json.dumps(ids).encode()).hexdigest()[:12]
        if args.cached_only and not (cache_dir / f"delete_{key}.npy").exists():
            n_long += kind == "long"
            continue
        fwd = []
        for _ in range(3):
            t0 = time.perf_counter()
            with torch.no_grad():
                model(input_ids=torch.tensor([ids]), use_cache=False)
            fwd.append(time.perf_counter() - t0)
        fwd = float(np.median(fwd))
        exact = cached(cache_dir / f"exact_{key}.npy", lambda: ablated_flow(model, ids).scores[0, 0])
        deletion = cached(cache_dir / f"delete_{key}.npy", lambda: occlusion(model, ids).scores[0, 0])
        with torch.no_grad():
            token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        inner = slice(1, n - 1)
        ref = exact[inner]
        cands: dict[str, tuple[np.ndarray, float]] = {}
        ones = np.ones(n)
        t0 = time.perf_counter()
        g1, z1 = grad_at(model, scaler, ids, token, ones)
        times = {"first-order": time.perf_counter() - t0}
        np.save(cache_dir / f"fo_{key}.npy", g1)  # for offline replays of the chooser's plans
        cands["first-order"] = (g1, 2)
        for tail in args.tails:
            t0 = time.perf_counter()
            b = budgeted_ablated_flow(model, ids, budget=5.0, tail=tail)
            times[f"budgeted-5-tail{tail:g}"] = time.perf_counter() - t0
            cands[f"budgeted-5-tail{tail:g}"] = (b.scores[0, 0], b.cost)
        if args.only == "budgeted":
            pass
        else:
            add_candidates(model, scaler, direct, ids, token, exact, cands)
        row = {"kind": kind, "n": n, "fwd_s": fwd, "token": tok.decode([token]), "text": text[:60], "key": key,
               "long_index": n_long if kind == "long" else None}
        n_long += kind == "long"
        for name, (x, cost) in cands.items():
            row[name] = {"rho": float(spearman(x[inner], ref)), "top10": recall(x[inner], ref), "passes": cost,
                         "rho_del": float(spearman(x[inner], deletion[inner])),
                         "x_fwd": times[name] / fwd if name in times else None}
        row["exact"] = {"rho_del": float(spearman(ref, deletion[inner]))}
        # where does first order fail: share of |exact| mass in the top 10, agreement on the top third
        order = np.argsort(-np.abs(ref))
        top = order[: max(3, len(ref) // 3)]
        row["first_order_rho_top_third"] = float(spearman(g1[inner][top], ref[top]))
        row["exact_mass_top10"] = float(np.abs(ref)[order[:10]].sum() / np.abs(ref).sum())
        rows.append(row)
        print(json.dumps({k: (v["rho"], v["top10"]) if isinstance(v, dict) and "rho" in v else v
                          for k, v in row.items() if k != "text"}), file=sys.stderr, flush=True)
    names = [k for k in rows[0] if isinstance(rows[0][k], dict) and "passes" in rows[0][k]]
    load = os.getloadavg()
    lines = [f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores shared)",
             "| estimator | band | passes | x fwd (wall) | rho vs exact (worst) | top-10 (worst) | rho vs deletion |",
             "|---|---|---|---|---|---|---|"]
    bands = {"short": lambda r: r["kind"] == "short",  # long: the first three (one_pass.py's) chose the tail share
             "long, dev": lambda r: r["kind"] == "long" and r["long_index"] < 3,
             "long, held out": lambda r: r["kind"] == "long" and r["long_index"] >= 3}
    for band, member in bands.items():
        group = [r for r in rows if member(r)]
        if not group:
            continue
        span = f"{min(r['n'] for r in group)}-{max(r['n'] for r in group)} tokens"
        for name in names:
            got = [r[name] for r in group]
            wall = [g["x_fwd"] for g in got if g["x_fwd"] is not None]
            lines.append(f"| {name} | {band} ({len(group)}, {span}) | {np.mean([g['passes'] for g in got]):.1f} | "
                         f"{f'{np.median(wall):.1f}' if wall else '-'} | "
                         f"{np.mean([g['rho'] for g in got]):+.2f} ({min(g['rho'] for g in got):+.2f}) | "
                         f"{np.mean([g['top10'] for g in got]):.2f} ({min(g['top10'] for g in got):.2f}) | "
                         f"{np.mean([g['rho_del'] for g in got]):+.2f} |")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "table": lines}, indent=1))


if __name__ == "__main__":
    main()
