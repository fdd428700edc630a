"""Child process of benchmarks/decoder_study.py: ContextCite 0.0.4 (Cohen-Wang et al., NeurIPS 2024) on
the study's prompts, run with the peers venv's Python (context-cite and at2 from the registry, torch
2.13.0 pinned, transformers 5.x like attnflow's own)::

    /work/venvs/peers/bin/python benchmarks/peers/contextcite_tokens.py MODEL_DIR IN.json OUT.json [--ablations 64]

IN.json: a list of ``{"ids": [...], "output": id, "sources": [[positions], ...]}``; OUT.json: per item
``{"scores": [one per source], "cpu_s": ..., "wall_s": ...}``.

ContextCite's own machinery, on the study's units: ``context_cite.utils.get_masks_and_logit_probs``
draws ``--ablations`` random keep-masks over the sources (keep probability 0.5, its default) and reads
the response's logit-probability under each ablated prompt; ``context_cite.solver.LassoRegression``
(its default surrogate) fits the per-source weights. What is adapted: the sources are the study's
units (tokens, or spans of tokens), an ablated source is *deleted* from the token ids (the study's
deletion ground truth) rather than cut from the context string, there is no chat template (the
prompt is the model's raw input, as every other method in the study sees it), and the "response" is
the one token the model predicts after the prompt. Positions outside every source are always kept.
ContextCite's ``nltk.download`` at import (no network here) is neutralised before the import; batch
size 1 (its default; a padded batch would shift positions).
"""

from __future__ import annotations

import json
import sys
import time

import torch

torch.set_num_threads(1)

import nltk  # noqa: E402

nltk.download = lambda *args, **kwargs: True  # context_cite.utils calls it at import; no network here

from context_cite.solver import LassoRegression  # noqa: E402
from context_cite.utils import aggregate_logit_probs, get_masks_and_logit_probs  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def attribute(model, tokenizer, ids: list[int], output: int, sources: list[list[int]], ablations: int) -> list[float]:
    def prompt_ids(mask):
        dropped = {p for s, keep in zip(sources, mask) if not keep for p in s}
        return [t for p, t in enumerate(ids) if p not in dropped]

    masks, logit_probs = get_masks_and_logit_probs(model, tokenizer, ablations, len(sources), prompt_ids, [output],
                                                   0.5, 1)
    weight, _bias = LassoRegression().fit(masks, aggregate_logit_probs(logit_probs), 1)
    return [float(w) for w in weight]


def main() -> None:
    path, source, target = sys.argv[1], sys.argv[2], sys.argv[3]
    ablations = int(sys.argv[sys.argv.index("--ablations") + 1]) if "--ablations" in sys.argv else 64
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out = []
    items = json.loads(open(source).read())
    for k, item in enumerate(items):
        cpu, wall = time.process_time(), time.perf_counter()
        scores = attribute(model, tokenizer, item["ids"], item["output"], item["sources"], ablations)
        out.append({"scores": scores, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall})
        print(f"\rcontextcite {k + 1}/{len(items)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    with open(target, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
