"""attnflow: which input tokens a Transformer's output really draws on.

Attention rollout and attention flow (Abnar & Zuidema, ACL 2020) on stock Hugging Face models.
"""

from attnflow.capture import capture, capture_gradients, capture_images, generate, load_model, load_vision_model
from attnflow.core import AttentionMaps, flow, grad_rollout, raw, rollout
from attnflow.errors import AttnflowError
from attnflow.explain import explain
from attnflow.explain_image import ImageExplanation, explain_image
from attnflow.explanation import Explanation
from attnflow.explanation_maps import ExplanationMaps, explain_maps
from attnflow.generation import Generation

__version__ = "0.1.0"

__all__ = [
    "AttentionMaps",
    "AttnflowError",
    "Explanation",
    "ExplanationMaps",
    "Generation",
    "ImageExplanation",
    "capture",
    "capture_gradients",
    "capture_images",
    "explain",
    "explain_image",
    "explain_maps",
    "flow",
    "generate",
    "grad_rollout",
    "load_model",
    "load_vision_model",
    "raw",
    "rollout",
]
