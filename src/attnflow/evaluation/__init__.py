"""Evaluation of explanations: protocols that take scores and a model or a callable that scores
inputs, never plots."""

from attnflow.evaluation.correlation import cls_scores, correlate, spearman, summarize
from attnflow.evaluation.importance import blank_out, input_gradients

__all__ = ["blank_out", "cls_scores", "correlate", "input_gradients", "spearman", "summarize"]
