"""Evaluation of attention explanations against importance baselines (takes results and models, never plots)."""

from attnflow.evaluation.correlation import cls_scores, correlate, spearman, summarize
from attnflow.evaluation.importance import blank_out, input_gradients

__all__ = ["blank_out", "cls_scores", "correlate", "input_gradients", "spearman", "summarize"]
