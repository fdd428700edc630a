"""Token labels for figures: thinned and shortened so that 5 or 500 tokens stay legible."""

from __future__ import annotations

import numpy as np

MAX_CHARS = 12


def short(token: str, limit: int = MAX_CHARS) -> str:
    """A token as a tick label: control characters made visible, long ones cut with an ellipsis, and
    ``$`` escaped so that matplotlib never reads a token as mathtext."""
    text = token.replace("\n", "\u21b5").replace("\t", "\u21e5") or "\u2205"
    text = text if len(text) <= limit else text[: limit - 1] + "\u2026"
    return plain(text)


def plain(text: str) -> str:
    """Text from the data (tokens, the input sentence) for a figure title, never read as mathtext."""
    return text.replace("$", r"\$")


def wrapped(text: str, inches: float) -> str:
    """``text`` broken into lines that fit about ``inches`` of a small (7-10 pt) figure font."""
    import textwrap

    return "\n".join(textwrap.wrap(text, max(30, int(inches * 14))))


def thinned(n: int, room: int, keep: tuple[int, ...] = ()) -> list[int]:
    """At most about ``room`` evenly spaced positions out of ``n``, always including ``keep``."""
    step = max(1, int(np.ceil(n / max(1, room))))
    ticks = set(range(0, n, step))
    for k in keep:  # a keeper replaces its close neighbours so that labels never collide
        ticks = {t for t in ticks if abs(t - k) >= step} | {k}
    return sorted(ticks)


def label_room(inches: float, fontsize: float) -> int:
    """How many rotated labels fit along ``inches`` at ``fontsize`` points (one line ~1.5 em)."""
    return max(2, int(inches * 72 / (1.5 * fontsize)))


def token_fontsize(n: int) -> float:
    return 9.0 if n <= 30 else 7.0 if n <= 80 else 6.0


# Settings that change the scores, in the order a figure title names them (key in params, label).
SETTINGS = (("weighting", "weighting"), ("residual", "residual"), ("head_fusion", "head fusion"),
            ("causal_norm", "causal norm"), ("discard_ratio", "discard ratio"))


def settings_line(result: object) -> str:
    """The settings a result was computed with, for figure titles: ``residual 0.5 · head fusion mean``
    (causal normalisation is named for decoders, "off" when unset; the weighting only when it is not
    the paper's attention weights)."""
    params = dict(getattr(result, "params", None) or {})
    if params.get("weighting") == "attention":
        del params["weighting"]
    causal = getattr(result, "kind", None) == "generation" or bool((getattr(result, "meta", None) or {}).get("causal"))
    if causal and params.get("causal_norm") is None:
        params["causal_norm"] = "off"
    return plain("  \u00b7  ".join(f"{label} {params[key]}" for key, label in SETTINGS if params.get(key) is not None))


def figure_title(result: object, title: str | None = None, limit: int = 80) -> str:
    """A figure's title: ``title`` (default: the input text, cut to ``limit`` characters; "" for none)
    over the settings line."""
    if title is None:
        text = getattr(result, "input", None)
        title = text if isinstance(text, str) else ""
    title = title if len(title) <= limit else title[: limit - 3] + "..."
    settings = settings_line(result)
    return "\n".join(line for line in (plain(title), settings) if line)
