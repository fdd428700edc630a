"""attnflow: which input tokens a Transformer's output really draws on.

Attention rollout and attention flow (Abnar & Zuidema, ACL 2020) on stock Hugging Face models.

    result = attnflow.explain("The keys to the cabinet", method="all")   # an attnflow.Attribution
    result.print(); result.plot("panels.png"); result.to_html("report.html")

The names below load on first use, so ``import attnflow`` (and ``attnflow --help``) stays fast:
torch and transformers are imported only when something is computed.
"""

from __future__ import annotations

from typing import Any

from attnflow import batch as _batch_package  # light: its names load on first use
from attnflow import capture as _capture_package  # light: its names load on first use
from attnflow import views as _views  # noqa: F401  (registers how results draw themselves)
from attnflow.config.lazy import lazy
from attnflow.config.moved import install as _install_moved_paths
from attnflow.errors import AttnflowError, AttnflowWarning, LongFlowWarning

__version__ = "0.2.0"

_install_moved_paths()  # the modules issue 43 moved keep their old paths for one release (config/moved.py)

# public name -> the module that defines it (in the layer order of the package)
_LAZY = {
    "AttentionMaps": "attnflow.core", "flow": "attnflow.api", "grad_rollout": "attnflow.core",
    "raw": "attnflow.core", "rollout": "attnflow.core", "as_stack": "attnflow.core",
    "joint_flow": "attnflow.core.joint", "joint_rollout": "attnflow.core.joint",
    "load_model": "attnflow.hf",
    "capture_gradients": "attnflow.capture", "capture_images": "attnflow.capture",
    "load_vision_model": "attnflow.capture",
    "Attribution": "attnflow.results", "load": "attnflow.results",
    "explain": "attnflow.api", "explain_attentions": "attnflow.api", "explain_image": "attnflow.api",
    "explain_maps": "attnflow.api", "generate": "attnflow.api", "faithfulness": "attnflow.api", "faithfulness_report": "attnflow.api",
    "BatchRun": "attnflow.api",
    "Settings": "attnflow.config", "methods": "attnflow.config", "register_architecture": "attnflow.api",
}

__all__ = ["AttnflowError", "AttnflowWarning", "LongFlowWarning", "batch", "capture", *_LAZY]


def capture(model: Any, tokenizer: Any, text: Any, *, truncate: bool = False, head_fusion: str | None = None,
            weighting: str = "attention") -> Any:
    """Run ``model`` on ``text`` (a string or a list of strings) and return its attention maps (every
    head, or fused per layer while the model runs with ``head_fusion="mean"``); see
    ``attnflow.capture.text.capture``. (Defined here because the name is also the capture
    package's, which would otherwise shadow the function once the package is loaded.)"""
    return _capture_package.capture(model, tokenizer, text, truncate=truncate, head_fusion=head_fusion,
                                    weighting=weighting)


def batch(data: Any, model: Any = None, **options: Any) -> Any:
    """Explain every row of a data set into a folder of Parquet shards, on Dask or in this process:
    ``attnflow.batch.run.batch`` (every keyword is its). (Defined here because the name is also
    the batch package's, which would otherwise shadow the function once the package is loaded.)"""
    return _batch_package.batch(data, model, **options)


# __dir__: the public API only (not the helpers this module imports: typing's ``Any``, ``lazy``, ...)
__getattr__, __dir__ = lazy(__name__, _LAZY, public=(*__all__, "__version__"))
