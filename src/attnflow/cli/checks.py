"""Checks commands make before any model loads (before torch is even imported): a refusal in well
under a second instead of after the model has loaded. The library makes the same checks again for
Python callers; these only make the command line fail fast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnflow.errors import AttnflowError


def check_text(text: str, what: str = "text") -> None:
    if not text.strip():
        raise AttnflowError(f"{what} must be a non-empty string")


def check_target_option(target: str | None) -> None:
    """``--target``: 'cls', 'last' or a (possibly negative) token position."""
    if target is not None and target not in ("cls", "last") and not target.lstrip("-").isdigit():
        raise AttnflowError(f"--target must be 'cls', 'last' or a token position; got {target!r}")


def check_agreement_model(model: Any) -> None:
    """``reproduce --model``: refuse a folder that is not a two-class subject-verb agreement classifier
    with the labels in the order the agreement data uses (``attnflow.data.agreement.LABELS``): the
    tables would compare the paper with scores of a model that answers another question, or of a
    randomly initialised classification head. None (the bundled model) and names that are not folders
    are left to the loader."""
    from attnflow.capture import pypi_models
    from attnflow.capture.load import read_config
    from attnflow.data.agreement import LABELS

    if model is None:
        return
    folder = Path(model).expanduser()
    wanted = {str(k): v for k, v in LABELS.items()}
    known = pypi_models.find(str(model)) if not folder.exists() else None
    if known is not None:  # refused by name: building a GGUF copy only to refuse it would take a minute
        arch, labels, what = known.title, {}, known.title
    elif (folder / "config.json").is_file():
        config = read_config(folder / "config.json")
        arch = (config.get("architectures") or ["model of unknown architecture"])[0]
        labels = {str(k): str(v) for k, v in (config.get("id2label") or {}).items()}
        what = f"a {arch}"
    else:
        return
    if "ForSequenceClassification" not in str(arch):
        found = f"{what}, without a classification head"
    elif labels != wanted:
        found = f"a classifier with the labels {labels}"
    else:
        return
    raise AttnflowError(f"reproduce needs a two-class subject-verb agreement classifier (labels {wanted}, as "
                        f"attnflow.reproduction.training.agreement writes); {str(folder)!r} is {found}")
