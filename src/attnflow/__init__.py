"""attnflow: which input tokens a Transformer's output really draws on.

Attention rollout and attention flow (Abnar & Zuidema, ACL 2020) on stock Hugging Face models.
"""

from attnflow.core import AttentionMaps, flow, raw, rollout
from attnflow.errors import AttnflowError

__version__ = "0.1.0"

__all__ = ["AttentionMaps", "AttnflowError", "flow", "raw", "rollout"]
