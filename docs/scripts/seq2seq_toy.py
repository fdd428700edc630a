"""A picture of the encoder-decoder view on a model that has learned something: a tiny Marian model
trained here, in about a minute on one CPU core, on a synthetic word-for-word "translation" with
reordering (adjective after the noun, as in French), then explained with raw cross-attention, joint
rollout and joint flow.

    PYTHONPATH=src python docs/scripts/seq2seq_toy.py --out docs/img/seq2seq_toy.png

No machine-translation model installs from PyPI, hence the toy; the task and vocabulary are made up
here, so nothing is downloaded. Prints the held-out exact-match accuracy and the figure's path.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch

WORDS = {"the": "le", "a": "un", "red": "rouge", "big": "grand", "old": "vieux", "small": "petit",
         "green": "vert", "cat": "chat", "dog": "chien", "house": "maison", "car": "voiture", "key": "clef",
         "box": "boite", "sees": "voit", "likes": "aime", "takes": "prend", "finds": "trouve"}
DETS, ADJS = ["the", "a"], ["red", "big", "old", "small", "green"]
NOUNS, VERBS = ["cat", "dog", "house", "car", "key", "box"], ["sees", "likes", "takes", "finds"]
SHOWN = ("the old dog finds a red key", "le chien vieux trouve un clef rouge")


def phrase(rng: random.Random) -> tuple[list[str], list[str]]:
    det, noun = rng.choice(DETS), rng.choice(NOUNS)
    if rng.random() < 0.6:
        adj = rng.choice(ADJS)
        return [det, adj, noun], [WORDS[det], WORDS[noun], WORDS[adj]]  # the adjective moves after the noun
    return [det, noun], [WORDS[det], WORDS[noun]]


def sentence(rng: random.Random) -> tuple[str, str]:
    (s1, t1), (s2, t2), verb = phrase(rng), phrase(rng), rng.choice(VERBS)
    return " ".join(s1 + [verb] + s2), " ".join(t1 + [WORDS[verb]] + t2)


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[PAD]", "[BOS]", "[EOS]", "[UNK]", *WORDS, *WORDS.values()])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(single="$A [EOS]", special_tokens=[("[EOS]", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]",
                                   unk_token="[UNK]")


def train(tok, steps: int, seed: int = 0):
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    config = MarianConfig(vocab_size=len(tok), d_model=64, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                          decoder_ffn_dim=128, max_position_embeddings=32, pad_token_id=0, eos_token_id=2,
                          decoder_start_token_id=1, forced_eos_token_id=None, dropout=0.0)
    model = MarianMTModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    rng = random.Random(seed)
    for step in range(steps):
        pairs = [sentence(rng) for _ in range(64)]
        batch = tok([s for s, _ in pairs], text_target=[t for _, t in pairs], padding=True, return_tensors="pt")
        labels = batch["labels"].masked_fill(batch["labels"] == 0, -100)
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), loss.item()


def accuracy(model, tok, n: int = 200, seed: int = 1) -> float:
    rng = random.Random(seed)
    pairs = [sentence(rng) for _ in range(n)]
    batch = tok([s for s, _ in pairs], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=12, num_beams=1, do_sample=False)
    return float(np.mean([tok.decode(o, skip_special_tokens=True) == t for o, (_, t) in zip(out, pairs)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/seq2seq_toy.png")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import attnflow

    tok = tokenizer()
    start = time.process_time()
    model, loss = train(tok, args.steps)
    print(f"trained {args.steps} steps in {time.process_time() - start:.0f} s CPU; last loss {loss:.4f}; "
          f"held-out exact match {accuracy(model, tok):.3f}")
    model.set_attn_implementation("eager")
    result = attnflow.explain(SHOWN[0], model, tokenizer=tok, target_text=SHOWN[1], method="all", target="vieux")
    _figure(result, args.out)
    enc = tok(SHOWN[0], return_tensors="pt")
    with torch.no_grad():
        encoder = model.get_encoder()(**enc, output_attentions=True).attentions
    e = np.asarray(attnflow.rollout(encoder))[-1]  # the encoder's own rollout, (S, S)
    print("encoder rollout, mean share of each source token: " + ", ".join(
        f"{w} {v:.2f}" for w, v in zip(result.sources[: result.input_length], e.mean(0))))
    for method in result.methods:
        aligned = [int(np.argmax(result.row(method, i)[-1][: result.input_length])) for i in range(len(result.targets))]
        print(f"{method:8s} top source per target: " + ", ".join(
            f"{t}<-{result.sources[j]}" for t, j in zip(result.targets, aligned)))
    print(f"wrote {args.out}")


def _figure(result, path: str) -> None:
    """Raw cross-attention, joint rollout and joint flow side by side: targets x source tokens, top layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnflow.views.files import save_figure

    s = result.input_length
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), constrained_layout=True)
    for ax, method in zip(axes, ("raw", "rollout", "flow")):
        grid = result.dense(method)[:, -1, :s]
        ax.imshow(grid, cmap="Blues", vmin=0, aspect="auto")
        ax.set_xticks(range(s), result.sources[:s], rotation=90)
        ax.set_yticks(range(len(result.targets)), result.targets)
        ax.set_title(f"{method}, decoder layer {result.n_layers}", fontsize=10)
    axes[0].set_ylabel("target token (predicted)")
    fig.suptitle("toy adjective-reordering translation: which source token each target token draws on", fontsize=11)
    save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    main()
