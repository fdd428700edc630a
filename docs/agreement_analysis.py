"""The figures docs/reproduction.md quotes beside the tables, for any agreement model:

    PYTHONPATH=src python docs/agreement_analysis.py [--model agreement|agreement_bert|DIR] [--examples 500] [--data ptb]

Per model: how saturated it is (logit margin, p(correct), how many blank-outs move p by < 1e-5), how
often each method's top word at each layer is the subject (the paper's narrative: rollout and flow
find the subject with depth, raw attention does not), how uniform the CLS row of raw attention is
per layer (entropy / log n: 1 = uniform), and how degenerate the paper's gradient sum is
(|sum_d g| / ||g||_2). All from the model's own held-out test examples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from attnflow.capture import capture  # noqa: E402
from attnflow.hf.load import quiet_transformers  # noqa: E402
from attnflow.evaluation.correlation import cls_scores, spearman  # noqa: E402
from attnflow.evaluation.importance import blank_out, embedding_gradients  # noqa: E402
from attnflow.reproduction.run import held_out_examples, load  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--data", default="templates", choices=("templates", "ptb"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    quiet_transformers()
    model, tokenizer, seed, path = load(args.model, args.data)
    margins, p_correct, small, top_subject = [], [], [], {}
    residue, entropy, residue_vs_norm = [], [], []
    for example in held_out_examples(args.examples, seed, args.data):
        maps = capture(model, tokenizer, example.text)
        ids = maps.input_ids
        logits = maps.logits.double()
        margins.append(float(logits[example.label] - logits[1 - example.label]))
        p_correct.append(float(logits.softmax(-1)[example.label]))
        words = [i for i in range(len(ids)) if i not in set(maps.special)]  # token i = word i - 1
        blanked = blank_out(model, ids, unk_id=tokenizer.unk_token_id, target=example.label, positions=words)
        small.append(np.mean(blanked[words] < 1e-5))
        scores = cls_scores(maps.attentions)
        raw = np.clip(scores["raw"], 1e-12, None)
        entropy.append(-(raw * np.log(raw)).sum(-1) / np.log(raw.shape[-1]))
        for method, rows in scores.items():
            if example.subject < 0:  # Penn Treebank prefixes: the subject is not known without a parse
                continue
            top = np.asarray(words)[np.argmax(rows[:, words], axis=1)]
            top_subject.setdefault(method, []).append(top == example.subject + 1)
        grad, _ = embedding_gradients(model, ids, at="word")
        paper_score = np.abs(grad.sum(-1))  # in the model's float32, as reproduce computes it
        grad = grad.astype(np.float64)
        norm = np.linalg.norm(grad, axis=-1)
        residue.append(np.median(np.abs(grad.sum(-1)) / norm))
        residue_vs_norm.append(spearman(paper_score, norm))
    print(f"model {path.name}, {args.examples} test examples (seed {seed})")
    print(f"logit margin (correct - other): median {np.median(margins):.2f}, min {np.min(margins):.2f}, "
          f"median |margin| {np.median(np.abs(margins)):.2f}; "
          f"p(correct) min {np.min(p_correct):.6f}, accuracy {np.mean(np.asarray(margins) > 0):.3f}")
    print(f"blank-outs of a word moving p(correct) by < 1e-5: {np.mean(small):.0%} (mean over examples)")
    if top_subject:
        print("top word (of the words) is the subject, per layer L1..L6:")
    for method, hits in top_subject.items():
        print(f"  {method:8s}" + "  ".join(f"{v:4.0%}" for v in np.mean(hits, axis=0)))
    print("CLS row of raw attention, entropy / log n per layer: " + "  ".join(f"{v:.2f}" for v in np.mean(entropy, 0)))
    print(f"|sum_d g| / ||g||_2 at the embedding sum: median over examples {np.median(residue):.1e}; "
          f"Spearman(|sum_d g| in float32, ||g||_2): mean {np.nanmean(residue_vs_norm):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
