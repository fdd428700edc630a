"""Train the bundled digits ViT: a 4-layer ``transformers`` ViT on scikit-learn's 8x8 digits.

    python -m attnflow.reproduction.training.digits_vit --out src/attnflow/models/digits_vit --seed 0

Each 8x8 image (ink = high values, 0..16) is scaled to [0, 1] and normalised with the training
split's pixel mean and std, written to ``preprocessor_config.json``; so a pixel set to 0 after
normalisation is the dataset mean (what the perturbation test fills removed patches with).
Patch size 2 gives a 4x4 grid of patches plus a CLS token: 17 tokens.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from attnflow.data.digits import SPLIT_SEED, TEST_SIZE, digits_split


def build_model(seed: int):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    config = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=64, num_hidden_layers=4,
                       num_attention_heads=4, intermediate_size=128, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, num_labels=10,
                       id2label={i: str(i) for i in range(10)}, label2id={str(i): i for i in range(10)})
    return ViTForImageClassification(config)


def train(out: Path, seed: int = 0, epochs: int = 40, threads: int = 1) -> float:
    """Train, save (safetensors, config, preprocessor config) to ``out``; return test accuracy."""
    from attnflow.hf.load import quiet_transformers

    quiet_transformers()
    torch.set_num_threads(threads)
    split = digits_split()
    mean, std = float(split["train_images"].mean()), float(split["train_images"].std())
    norm = lambda x: torch.from_numpy((x - mean) / std).unsqueeze(1)  # noqa: E731  (n, 1, 8, 8)
    x_tr, y_tr = norm(split["train_images"]), torch.from_numpy(split["train_labels"])
    x_te, y_te = norm(split["test_images"]), torch.from_numpy(split["test_labels"])
    model = build_model(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    steps = epochs * ((len(x_tr) + 63) // 64)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x_tr), generator=gen).split(64):
            loss = torch.nn.functional.cross_entropy(model(pixel_values=x_tr[idx]).logits, y_tr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(pixel_values=x_te).logits.argmax(-1) == y_te).float().mean())
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    # Read by attnflow.capture.vision: input size, grey level, and the training split's normalisation.
    preprocessor = {"size": {"height": 8, "width": 8}, "image_mean": [mean], "image_std": [std],
                    "rescale_factor": 1 / 255, "do_normalize": True, "do_resize": True,
                    "color": "L", "note": "sklearn digits: light ink on a dark background"}
    (out / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")
    (out / "training.json").write_text(json.dumps({
        "command": f"python -m attnflow.reproduction.training.digits_vit --out {out} --seed {seed} --epochs {epochs}",
        "seed": seed, "epochs": epochs, "test_size": TEST_SIZE, "split_seed": SPLIT_SEED,
        "test_accuracy": round(accuracy, 4)}, indent=2) + "\n")
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the model to")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    accuracy = train(args.out, args.seed, args.epochs, args.threads)
    print(f"test accuracy {accuracy:.4f} ({args.out})")


if __name__ == "__main__":
    main()
