"""Capture: run a model and collect its attention per layer. Knows about transformers, not plots."""

from attnflow.capture.gradients import capture_gradients
from attnflow.capture.load import default_model_path, load_model
from attnflow.capture.generation import generate
from attnflow.capture.text import capture
from attnflow.capture.vision import capture_images, load_vision_model

__all__ = ["capture", "capture_gradients", "capture_images", "default_model_path", "generate", "load_model",
           "load_vision_model"]
