"""Entry points: text, generation and images in, :class:`~attnflow.results.Attribution` out.

They compose capture (models -> attention), core (the methods) and results; the CLI and the app are
thin layers over them.
"""

from attnflow.api.batch import BatchRun, batch
from attnflow.api.faithfulness import faithfulness, faithfulness_report
from attnflow.api.generate import generate
from attnflow.api.images import IMAGE_METHODS, explain_image
from attnflow.api.models import Loaded, register_architecture, resolve
from attnflow.api.text import FLOW_ALL_MAX, MAPS_ALL_MAX, TEXT_METHODS, explain, explain_attentions, explain_maps

__all__ = ["BatchRun", "FLOW_ALL_MAX", "IMAGE_METHODS", "Loaded", "MAPS_ALL_MAX", "TEXT_METHODS", "batch",
           "explain", "register_architecture", "resolve",
           "explain_attentions", "explain_image", "explain_maps", "faithfulness", "faithfulness_report", "generate"]
