"""Evaluation of explanations: protocols that take scores and a callable that scores inputs, never a model."""
