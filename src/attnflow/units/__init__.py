"""Text units: the words, sentences and passages of a text as groups of its tokens, read from a
tokenizer's character offsets (:mod:`~attnflow.units.segments`); what ``spans=`` names and how a span's
score spreads back over its tokens (:mod:`~attnflow.units.spans`); how much of a text a model's
vocabulary covers (:mod:`~attnflow.units.vocabulary`). Knows tokenizers, never a model's run.
"""
