"""What distillation changes in the student: CLS's attention, and where the decision's evidence sits.

    nice -n 10 python docs/scripts/agreement_recency.py DIR_OR_NAME [DIR_OR_NAME ...] [--examples 300]

Per model, on the first --examples test examples of its own seed (forward passes only, no flow):

- CLS's layer-l attention (mean over heads): the share on the subject word, how often the subject
  is its top word, and its entropy / log n (1 = uniform), per layer;
- mean attention distance, sum_j a_ij |i - j| averaged over every query row i, per layer (lower =
  more local);
- blank-out evidence (|p(correct) - p(correct with word i replaced by UNK)|, words only) of the
  model and, for a distilled model, of its LSTM teacher (DIR/teacher): the share on the subject,
  the share on the last two words, and the evidence's centre of mass in relative position
  (0 = first word, 1 = last word). The Reflect paper's claim is that distillation passes the
  LSTM's recency bias to the student: a later centre, more mass on the last words.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from attnflow.hf.load import quiet_transformers  # noqa: E402
from attnflow.reproduction.run import held_out_examples, load  # noqa: E402


def teacher_of(path: Path, tokenizer):
    weights = path / "teacher" / "model.safetensors"
    if not weights.is_file():
        return None
    from safetensors.torch import load_file

    from attnflow.reproduction.training.distill import LSTMTeacher

    teacher = LSTMTeacher(len(tokenizer), tokenizer.pad_token_id)
    teacher.load_state_dict(load_file(weights))
    return teacher.eval()


def blank_out_words(model, ids: torch.Tensor, words: list[int], unk: int, label: int) -> np.ndarray:
    """|p(label) - p(label | word blanked)| for each word position, one batch."""
    batch = ids.repeat(len(words) + 1, 1)
    for row, position in enumerate(words, start=1):
        batch[row, position] = unk
    with torch.no_grad():
        p = model(input_ids=batch, attention_mask=torch.ones_like(batch)).logits.double().softmax(-1)[:, label]
    return (p[0] - p[1:]).abs().numpy()


def evidence(scores: np.ndarray, subject: int) -> dict[str, float]:
    total = scores.sum()
    if total <= 0:
        return {}
    rel = np.linspace(0, 1, len(scores)) if len(scores) > 1 else np.zeros(1)
    return {"subject": scores[subject] / total, "last_two": scores[-2:].sum() / total,
            "centre": float((scores * rel).sum() / total)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    quiet_transformers()
    print("load average", os.getloadavg())
    everything = {}
    for name in args.models:
        model, tokenizer, seed, path = load(name)
        teacher = teacher_of(path, tokenizer)
        rows = {k: [] for k in ("cls_subject", "cls_top_subject", "cls_entropy", "distance")}
        ev = {"student": [], "teacher": []}
        for example in held_out_examples(args.examples, seed):
            enc = tokenizer(example.text, return_tensors="pt")
            ids = enc.input_ids
            with torch.no_grad():
                att = torch.stack(model(**enc, output_attentions=True).attentions)[:, 0].mean(1).double().numpy()
            n = ids.shape[1]
            words = list(range(1, n - 1)) if tokenizer.eos_token_id is not None else list(range(1, n))
            subject = example.subject + 1
            cls = att[:, 0, :]  # (layers, n)
            rows["cls_subject"].append(cls[:, subject])
            rows["cls_top_subject"].append(np.asarray(words)[cls[:, words].argmax(1)] == subject)
            rows["cls_entropy"].append(-(np.clip(cls, 1e-12, None) * np.log(np.clip(cls, 1e-12, None))).sum(1) / np.log(n))
            dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
            rows["distance"].append((att * dist).sum(-1).mean(-1))
            for who, net in (("student", model), ("teacher", teacher)):
                if net is None:
                    continue
                scores = blank_out_words(net, ids[0], words, tokenizer.unk_token_id, example.label)
                e = evidence(scores, example.subject)
                if e:
                    ev[who].append(e)
        out = {k: np.mean(v, 0).round(3).tolist() for k, v in rows.items()}
        for who, items in ev.items():
            if items:
                out[f"{who}_evidence"] = {k: round(float(np.mean([i[k] for i in items])), 3) for k in items[0]}
        everything[name] = out
        print(name, json.dumps(out), flush=True)
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
