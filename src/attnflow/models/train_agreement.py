"""Train the bundled subject-verb agreement model (Abnar & Zuidema 2020, section 2).

    python -m attnflow.models.train_agreement --out DIR --seed 0

The paper's model: a Transformer encoder without causal masking, 6 layers, 8 heads, hidden 128, a
CLS token whose final embedding feeds the classifier. Here it is a stock ``BertForSequenceClassification``
(BERT's pooler reads the CLS position) with a word-level tokenizer, so that it loads with
``AutoModelForSequenceClassification`` / ``AutoTokenizer`` like any Hugging Face model.
CPU only, a few minutes on 2 cores, deterministic for a given seed and thread count.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

from attnflow.data import agreement

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Word-level tokenizer over the grammar's vocabulary; every input becomes ``[CLS] w1 ... wn``."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + agreement.vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()  # "The key" and "the key" are the same input
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # words and punctuation; punctuation becomes [UNK]
    # No trailing [SEP]: the input is the sentence up to the verb, read out at CLS as in the paper.
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A", pair="[CLS] $A [SEP] $B", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        model_max_length=64,
    )


def build_model(vocab_size: int, pad_id: int) -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=vocab_size, hidden_size=128, num_hidden_layers=6, num_attention_heads=8,
        intermediate_size=512, max_position_embeddings=64, type_vocab_size=1, pad_token_id=pad_id,
        num_labels=2, id2label=dict(agreement.LABELS), label2id={v: k for k, v in agreement.LABELS.items()},
    )
    return BertForSequenceClassification(config)


def accuracy(model, tokenizer, examples, batch_size: int = 256) -> dict[str, float]:
    """Accuracy overall, by attractor count (``attractors=k``) and by template (``template=name``)."""
    model.eval()
    correct = []
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            enc = tokenizer([e.text for e in chunk], padding=True, return_tensors="pt")
            pred = model(**enc).logits.argmax(-1)
            correct += (pred == torch.tensor([e.label for e in chunk])).tolist()
    out = {"overall": float(np.mean(correct)), "n": len(examples)}
    for key in ("attractors", "template"):
        for value in sorted({getattr(e, key) for e in examples}):
            hits = [c for c, e in zip(correct, examples) if getattr(e, key) == value]
            out[f"{key}={value}"] = float(np.mean(hits))
            out[f"n {key}={value}"] = len(hits)
    return out


def _batches(examples: list, size: int, rng: random.Random) -> list[list]:
    """Shuffled batches of similar length (less padding, so fewer wasted FLOPs on CPU)."""
    shuffled = list(examples)
    rng.shuffle(shuffled)
    batches = []
    pool = size * 50
    for i in range(0, len(shuffled), pool):
        part = sorted(shuffled[i : i + pool], key=lambda e: len(e.text.split()))
        batches += [part[j : j + size] for j in range(0, len(part) - size + 1, size)]
    rng.shuffle(batches)
    return batches


def train(out: Path, seed: int = 0, epochs: int = 2, batch_size: int = 64, lr: float = 1e-3,
          threads: int = 1) -> dict:
    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    data = agreement.splits(seed)
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), tokenizer.pad_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * (len(data["train"]) // batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    order = random.Random(seed)
    start = time.time()
    for epoch in range(epochs):
        model.train()
        for step, chunk in enumerate(_batches(data["train"], batch_size, order)):
            enc = tokenizer([e.text for e in chunk], padding=True, return_tensors="pt")
            loss = model(**enc, labels=torch.tensor([e.label for e in chunk])).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % 100 == 0:
                print(f"  step {step}  loss {loss.item():.4f}  ({time.time() - start:.0f}s)", flush=True)
        val = accuracy(model, tokenizer, data["validation"])["overall"]
        print(f"epoch {epoch + 1}/{epochs}  loss {loss.item():.4f}  validation accuracy {val:.4f}  "
              f"({time.time() - start:.0f}s)", flush=True)
    report = {"seed": seed, "epochs": epochs, "batch_size": batch_size, "lr": lr, "threads": threads,
              "train_seconds": round(time.time() - start, 1),
              "sizes": {k: len(v) for k, v in data.items()},
              **{name: accuracy(model, tokenizer, data[name]) for name in ("validation", "test", "unseen")},
              # the fixed slice tests/test_agreement.py re-checks
              "test_first_1000": accuracy(model, tokenizer, data["test"][:1000])["overall"]}
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # safetensors by default
    tokenizer.save_pretrained(out)
    # transformers 5 records its new class name, which 4.x cannot resolve; the 4.x name loads in both.
    config_file = out / "tokenizer_config.json"
    tok_config = json.loads(config_file.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(tok_config, indent=2) + "\n")
    (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model into")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    report = train(args.out, seed=args.seed, epochs=args.epochs, threads=args.threads)
    for name in ("test", "unseen"):
        print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in report[name].items()})


if __name__ == "__main__":
    main()
