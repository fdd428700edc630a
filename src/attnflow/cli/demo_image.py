"""The image pipeline on a photo: Grace Hopper (bundled with matplotlib), all four methods.

    python -m attnflow.cli.demo_image --png hopper.png                 # random-weight ViT (pipeline only)
    python -m attnflow.cli.demo_image --model PATH --png hopper.png    # your ImageNet ViT/DeiT/...

No pretrained ImageNet ViT installs here, so without --model the overlays come from a ViT with
*random weights* at 224x224 (patch 16, 4 layers): they show that the pipeline runs end to end, not
what a trained model looks at.
"""

from __future__ import annotations

import argparse

import torch

from attnflow.api.images import IMAGE_METHODS, explain_image
from attnflow.views.image import save_overlays


def random_vit(seed: int = 0):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    config = ViTConfig(image_size=224, patch_size=16, hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                       intermediate_size=384, num_labels=10, attn_implementation="eager")
    return ViTForImageClassification(config).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="image classifier folder (default: a random-weight ViT)")
    parser.add_argument("--png", required=True)
    args = parser.parse_args()
    from matplotlib import cbook

    from attnflow.api.models import quiet_transformers

    quiet_transformers()
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        from PIL import Image

        photo = Image.open(f).convert("RGB")
    model = args.model if args.model else random_vit()
    result = explain_image(photo, model, method=list(IMAGE_METHODS))
    save_overlays([result], args.png, columns=4, inputs=True, dpi=72)
    label = "your model" if args.model else "a RANDOM-weight ViT (pipeline demo, not a trained model)"
    print(f"wrote {args.png}: raw, rollout, flow, grad-rollout from {label}")


if __name__ == "__main__":
    main()
