"""One-off diagnostic for docs/vision.md: is the weak grad-rollout result about attention gradients or
about gradients at all? Perturbation AUCs (mean fill) of gradient-based relevance on the digits ViT.

    PYTHONPATH=src python docs/scripts/grad_diagnostic.py
"""
import numpy as np
import torch
torch.set_num_threads(1)
from attnflow.capture.vision import capture_images, load_vision_model
from attnflow.core import rollout
from attnflow.core.gradient import grad_rollout
from attnflow.evaluation.perturbation import perturbation_curves
from attnflow.data.digits import digits_split
m = load_vision_model(); s = digits_split()
maps = capture_images(m, list(s["test_images"]), gradients=True)
A, G = maps.attentions, maps.gradients
scores = {}
scores["grad-rollout"] = np.asarray(grad_rollout(A, G))[:, -1, 0, 1:].reshape(-1, 4, 4)
scores["top-layer grad*attn"] = (G[:, -1] * A[:, -1]).clamp(min=0).mean(1)[:, 0, 1:].numpy().reshape(-1, 4, 4)
scores["rollout"] = np.asarray(rollout(A))[:, -1, 0, 1:].reshape(-1, 4, 4)
# pixel gradient x input, summed per patch
x = maps.pixel_values.clone().requires_grad_(True)
logits = m(pixel_values=x).logits
logits.gather(1, logits.argmax(-1, keepdim=True)).sum().backward()
gi = (x.grad * x).detach()[:, 0]
scores["grad x input (pixels)"] = gi.reshape(-1, 4, 2, 4, 2).sum((2, 4)).numpy()
scores["|grad x input|"] = gi.abs().reshape(-1, 4, 2, 4, 2).sum((2, 4)).numpy()
scores["random"] = np.random.default_rng(0).random((len(x), 4, 4))
predict = lambda p: m(pixel_values=p).logits
for fill in (0.0,):
    for c in perturbation_curves(predict, maps.pixel_values, s["test_labels"], scores, fill=fill):
        print(f"{c.method:24s} {c.order:9s} {c.auc:.3f}")
