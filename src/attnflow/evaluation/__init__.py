"""Evaluation of explanations: protocols that take scores and a model or a callable that scores
inputs, never plots."""

from attnflow.evaluation.correlation import cls_scores, correlate, spearman, spearman_dense, summarize
from attnflow.evaluation.importance import blank_out, embedding_gradients, input_gradients

__all__ = ["blank_out", "cls_scores", "correlate", "embedding_gradients", "input_gradients", "spearman",
           "spearman_dense", "summarize"]
