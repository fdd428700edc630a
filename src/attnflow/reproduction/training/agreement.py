"""Train a bundled subject-verb agreement model (Abnar & Zuidema 2020, section 2).

    python -m attnflow.reproduction.training.agreement --out DIR --seed 0                 # the paper's block type
    python -m attnflow.reproduction.training.agreement --out DIR --seed 0 --arch bert     # the older BERT model
    python -m attnflow.reproduction.training.agreement --out DIR --seed 0 --distill       # the paper's checkpoint's recipe

The paper's model: "GPT-2 Transformer blocks" without the causal mask, 6 layers, 8 heads, hidden 128,
a CLS token whose final embedding feeds the classifier. Two stock Hugging Face architectures, one
row each in ``ARCHITECTURES`` (everything that differs between them lives there):

- ``gpt2-blocks`` (``bundled_model_path("agreement")``, the default): ``MegatronBertForSequenceClassification``.
  Megatron-BERT's layers are GPT-2's pre-LayerNorm blocks (``x + attn(LN(x))``, ``x + mlp(LN(x))``),
  bidirectional, with GPT-2's un-normalised embedding sum as the first block's input and a final
  LayerNorm before the CLS read-out; the paper's dropout (0.4 residual, 0.6 attention) and
  initialiser range (0.05); the tokenizer adds the paper's end-of-sentence token (``[CLS] w1 ... wn
  [EOS]``). Why this architecture and what still differs: ``docs/reproduction.md``, "Model".
- ``bert`` (``bundled_model_path("agreement_bert")``): ``BertForSequenceClassification``, post-LN
  blocks and a tanh pooler, ``[CLS] w1 ... wn``; kept for comparison. Bit-identical to the model
  this module trained before the architecture table existed.

Both load with ``AutoModelForSequenceClassification`` / ``AutoTokenizer`` like any Hugging Face model.
CPU only, minutes on one core, deterministic for a given seed and thread count.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    MegatronBertConfig,
    MegatronBertForSequenceClassification,
    PreTrainedTokenizerFast,
)

from attnflow.data import agreement, ptb_agreement


@dataclass(frozen=True)
class Architecture:
    """What differs between the bundled agreement models: tokenizer, model class and configuration."""

    specials: tuple[str, ...]  # special tokens, ids 0.. in this order
    eos: str | None  # appended to every input (the paper's end-of-sentence token), or None
    build: Callable[[int, int], torch.nn.Module]  # (vocab_size, pad_id) -> freshly initialised model
    folder: str  # bundled_model_path(folder)


def _labels() -> dict:
    return {"num_labels": 2, "id2label": dict(agreement.LABELS),
            "label2id": {v: k for k, v in agreement.LABELS.items()}}


def _bert(vocab_size: int, pad_id: int) -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=vocab_size, hidden_size=128, num_hidden_layers=6, num_attention_heads=8,
        intermediate_size=512, max_position_embeddings=64, type_vocab_size=1, pad_token_id=pad_id, **_labels(),
    )
    return BertForSequenceClassification(config)


def _gpt2_blocks(vocab_size: int, pad_id: int) -> MegatronBertForSequenceClassification:
    # GPT-2's activation and LayerNorm epsilon; the paper's small_gpt_v9 dropout and initialiser range
    # (samiraabnar/Reflect, util/model_configs.py: resid 0.4, attn 0.6, embd 0.2, init 0.05). Megatron-BERT
    # has one rate for embeddings and residual branches, so the embedding dropout is 0.4, not 0.2.
    config = MegatronBertConfig(
        vocab_size=vocab_size, hidden_size=128, num_hidden_layers=6, num_attention_heads=8,
        intermediate_size=512, max_position_embeddings=64, type_vocab_size=1, pad_token_id=pad_id,
        hidden_act="gelu_new", layer_norm_eps=1e-5, initializer_range=0.05,
        hidden_dropout_prob=0.4, attention_probs_dropout_prob=0.6, **_labels(),
    )
    return MegatronBertForSequenceClassification(config)


ARCHITECTURES: dict[str, Architecture] = {
    "gpt2-blocks": Architecture(specials=("[PAD]", "[UNK]", "[CLS]", "[EOS]"), eos="[EOS]", build=_gpt2_blocks,
                                folder="agreement"),
    "bert": Architecture(specials=("[PAD]", "[UNK]", "[CLS]", "[SEP]"), eos=None, build=_bert,
                         folder="agreement_bert"),
}
DEFAULT_ARCH = "gpt2-blocks"


@dataclass(frozen=True)
class DataSource:
    """Where the sentences come from: the templated grammar (the bundled models) or the Penn Treebank
    text (``--data ptb``: built on the user's machine, never bundled)."""

    splits: Callable[[int, dict | None], dict[str, list]]  # (seed, sizes) -> {"train", "validation", "test", ...}
    vocabulary: Callable[[], list[str]]
    unk: str  # the unknown-word token (blank-out's replacement)
    pre_tokenizer: Callable[[], object]


DATA: dict[str, DataSource] = {
    # words and punctuation; punctuation becomes [UNK]
    "templates": DataSource(agreement.splits, agreement.vocabulary, "[UNK]", pre_tokenizers.Whitespace),
    # the treebank is already tokenized ("n't", "u.s.", "<unk>"): split on spaces only
    "ptb": DataSource(ptb_agreement.splits, ptb_agreement.vocabulary,
                      ptb_agreement.UNK, pre_tokenizers.WhitespaceSplit),
}


def build_tokenizer(arch: str = DEFAULT_ARCH, data: str = "templates") -> PreTrainedTokenizerFast:
    """Word-level tokenizer over the data's vocabulary: ``[CLS] w1 ... wn`` (+ ``[EOS]`` for gpt2-blocks)."""
    spec, source = ARCHITECTURES[arch], DATA[data]
    specials = [source.unk if t == "[UNK]" else t for t in spec.specials]
    vocab = {tok: i for i, tok in enumerate(specials + source.vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=source.unk))
    tok.normalizer = normalizers.Lowercase()  # "The key" and "the key" are the same input
    tok.pre_tokenizer = source.pre_tokenizer()
    # The input is the sentence up to the verb, read out at CLS as in the paper.
    end = spec.eos or "[SEP]"
    single = f"[CLS] $A {spec.eos}" if spec.eos else "[CLS] $A"
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=f"[CLS] $A {end} $B {end}",
        special_tokens=[("[CLS]", vocab["[CLS]"]), (end, vocab[end])],
    )
    names = {"eos_token": spec.eos} if spec.eos else {"sep_token": "[SEP]"}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token=source.unk, pad_token="[PAD]", cls_token="[CLS]", model_max_length=64,
        **names,
    )


def build_model(vocab_size: int, pad_id: int, arch: str = DEFAULT_ARCH) -> torch.nn.Module:
    return ARCHITECTURES[arch].build(vocab_size, pad_id)


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
          threads: int = 1, arch: str = DEFAULT_ARCH, sizes: dict[str, int] | None = None,
          data: str = "templates", distill: bool = False, curve_every: int = 125,
          curve_examples: int = 500) -> dict:
    """Train one model and save it (safetensors, tokenizer, ``training.json``) into ``out``.

    The recipe is the same for both architectures (AdamW, one-cycle, 2 epochs); only the rows of
    ``ARCHITECTURES`` differ. ``data`` picks a row of ``DATA``; ``sizes`` overrides the
    split sizes (for quick tests). ``distill=True`` trains the same student with the same optimiser
    and batches, together with an LSTM teacher whose soft targets it also learns from
    (``attnflow.reproduction.training.distill``); the teacher is saved in ``out/teacher``.
    Every ``curve_every`` steps the accuracy on the first ``curve_examples`` validation examples is
    recorded (``training.json``'s ``curve``); evaluation draws no random numbers, so it does not
    change the weights.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {', '.join(ARCHITECTURES)}; got {arch!r}")
    if data not in DATA:
        raise ValueError(f"data must be one of {', '.join(DATA)}; got {data!r}")
    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    source = data
    data = DATA[source].splits(seed, sizes)
    tokenizer = build_tokenizer(arch, source)
    model = build_model(len(tokenizer), tokenizer.pad_token_id, arch)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps = max(1, epochs * (len(data["train"]) // batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    order = random.Random(seed)
    start, cpu_start = time.time(), time.process_time()
    history = []
    distiller = teacher = None
    if distill:
        from attnflow.reproduction.training.distill import LSTMTeacher, OnlineDistiller

        teacher = LSTMTeacher(len(tokenizer), tokenizer.pad_token_id)
        distiller = OnlineDistiller(model, teacher, opt, sched)
    curve: list[dict] = []
    watched = data["validation"][:curve_examples]

    def record(step: int, losses: dict[str, float]) -> None:
        point = {"step": step, **{k: round(v, 5) for k, v in losses.items()},
                 "student_validation": accuracy(model, tokenizer, watched)["overall"]}
        if teacher is not None:
            point["teacher_validation"] = accuracy(teacher, tokenizer, watched)["overall"]
        curve.append(point)

    global_step = 0
    window: dict[str, list[float]] = {}
    for epoch in range(epochs):
        for step, chunk in enumerate(_batches(data["train"], batch_size, order)):
            enc = tokenizer([e.text for e in chunk], padding=True, return_tensors="pt")
            labels = torch.tensor([e.label for e in chunk])
            if distiller is not None:
                losses = distiller.step(dict(enc), labels)
            else:
                model.train()
                loss = model(**enc, labels=labels).loss
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                losses = {"student_loss": loss.item()}
            for k, v in losses.items():
                window.setdefault(k, []).append(v)
            global_step += 1
            if curve_every and global_step % curve_every == 0:
                record(global_step, {k: float(np.mean(v)) for k, v in window.items()})
                window = {}
            if step % 100 == 0:
                shown = "  ".join(f"{k} {v:.4f}" for k, v in losses.items())
                print(f"  step {step}  {shown}  ({time.time() - start:.0f}s)", flush=True)
        val = accuracy(model, tokenizer, data["validation"])["overall"]
        history.append(val)
        print(f"epoch {epoch + 1}/{epochs}  validation accuracy {val:.4f}  "
              f"({time.time() - start:.0f}s)", flush=True)
    report = {"seed": seed, "arch": arch, "data": source, "epochs": epochs, "batch_size": batch_size, "lr": lr, "threads": threads,
              "train_seconds": round(time.time() - start, 1),
              "train_cpu_seconds": round(time.process_time() - cpu_start, 1),
              "recipe": "online distillation from an LSTM teacher" if distill else "labels only",
              "curve": curve,
              "sizes": {k: len(v) for k, v in data.items()},
              "validation_by_epoch": history,
              "majority_class_rate": {name: max(np.mean([e.label for e in v]), 1 - np.mean([e.label for e in v]))
                                      for name, v in data.items()},
              **{name: accuracy(model, tokenizer, data[name]) for name in data if name != "train"},
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
    if teacher is not None:
        from dataclasses import asdict

        from safetensors.torch import save_file

        from attnflow.reproduction.training.distill import REFLECT, DistillSettings

        report["distillation"] = {"settings": asdict(DistillSettings()), "from_reflect": REFLECT}
        report["teacher"] = {name: accuracy(teacher, tokenizer, data[name]) for name in data if name != "train"}
        (out / "teacher").mkdir(exist_ok=True)
        save_file({k: v.contiguous() for k, v in teacher.state_dict().items()}, out / "teacher" / "model.safetensors")
    (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model into")
    parser.add_argument("--arch", choices=list(ARCHITECTURES), default=DEFAULT_ARCH)
    parser.add_argument("--data", choices=list(DATA), default="templates",
                        help="templates (the bundled models) or ptb (Penn Treebank text; needs the treebank package)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--distill", action="store_true",
                        help="train together with an LSTM teacher and learn from its soft targets too "
                             "(the recipe of the paper's checkpoint; docs/reproduction.md)")
    args = parser.parse_args(argv)
    report = train(args.out, seed=args.seed, epochs=args.epochs, threads=args.threads, arch=args.arch,
                   data=args.data, distill=args.distill)
    for who, part in (("student", report), ("teacher", report.get("teacher", {}))):
        for name in ("test", "unseen"):
            if name in part:
                print(who, name, {k: round(v, 4) if isinstance(v, float) else v for k, v in part[name].items()})
    print(f"training: {report['train_cpu_seconds']} s of CPU, {report['train_seconds']} s wall")


if __name__ == "__main__":
    main()
