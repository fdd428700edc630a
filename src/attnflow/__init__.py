"""attnflow: which input tokens a Transformer's output really draws on.

Attention rollout and attention flow (Abnar & Zuidema, ACL 2020) on stock Hugging Face models.
"""

from attnflow.capture import capture, generate, load_model
from attnflow.core import AttentionMaps, flow, raw, rollout
from attnflow.errors import AttnflowError
from attnflow.explain import explain
from attnflow.explanation import Explanation
from attnflow.generation import Generation

__version__ = "0.1.0"

__all__ = [
    "AttentionMaps",
    "AttnflowError",
    "Explanation",
    "Generation",
    "capture",
    "explain",
    "flow",
    "generate",
    "load_model",
    "raw",
    "rollout",
]
