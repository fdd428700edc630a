"""The agreement model for ``attnflow reproduce --data ptb``: trained on the user's machine on first use.

It cannot ship with attnflow: it is trained on text from the ``treebank`` package, whose licence is
unclear (see ``attnflow.data.ptb_agreement``). The first call trains the paper's architecture
(``gpt2-blocks``, the bundled recipe) on the treebank's verb-number prefixes and saves it under
``$XDG_CACHE_HOME/attnflow`` (default ``~/.cache/attnflow``); later calls reuse it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from attnflow.hf.pypi_models import cache_dir
from attnflow.data import ptb_agreement


def ptb_model_path(seed: int = 0, log: Callable[[str], None] | None = print) -> Path:
    """The folder of the Penn Treebank agreement model for ``seed``, training it first if it is missing."""
    target = cache_dir() / f"agreement_ptb_seed{seed}"
    if (target / "config.json").is_file():
        return target
    ptb_agreement.penn()  # a one-line error now if the treebank package is missing, not after a setup
    from attnflow.reproduction.training.agreement import train

    if log is not None:
        log(f"training the Penn Treebank agreement model (first use, a few minutes on one core) into {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Trained beside the target and renamed, so an interrupted first run never leaves half a model.
    tmp = Path(tempfile.mkdtemp(prefix=".agreement_ptb-", dir=target.parent))
    try:
        train(tmp, seed=seed, data="ptb")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if (target / "config.json").is_file():  # another process built it meanwhile
            return target
        raise
    return target
