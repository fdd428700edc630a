"""Training scripts for the models that ship with attnflow (their weights live in ``attnflow.models``).

- ``attnflow.reproduction.training.agreement``: the subject-verb agreement models
  (``python -m attnflow.reproduction.training.agreement --out DIR --seed 0``);
- ``attnflow.reproduction.training.ptb``: the Penn Treebank agreement model, trained on first use;
- ``attnflow.reproduction.training.digits_vit``: the tiny ViT on scikit-learn's digits.

They sit above ``capture`` (they may use its loaders); ``attnflow.models`` is a leaf that only
holds the weights and finds their folders.
"""
