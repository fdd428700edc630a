"""Text units: the words, sentences and passages of a text as groups of its tokens, read from a
tokenizer's character offsets (``segments``); what ``spans=`` names and how a span's
score spreads back over its tokens (``spans``); how much of a text a model's
vocabulary covers (``vocabulary``). Knows tokenizers, never a model's run.
"""
