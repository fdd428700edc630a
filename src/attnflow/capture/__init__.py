"""Capture: run a model and collect its attention per layer. Knows about transformers, not plots."""

from attnflow.capture.load import default_model_path, load_model
from attnflow.capture.generation import generate
from attnflow.capture.text import capture

__all__ = ["capture", "default_model_path", "generate", "load_model"]
