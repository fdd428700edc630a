"""Generation: a completion and the attention rollout of every generated token.

Positions: the prompt is ``0..m-1``, generated token ``i`` sits at ``m + i``. Generated token ``i``
is explained by the position that predicted it, ``m - 1 + i`` (the last prompt token for ``i = 0``).

- ``rows[i, l, j]``: that position's rollout row at layer ``l+1`` over all positions ``j`` of
  ``prompt_tokens + generated_tokens`` (``m + n_new`` columns; zero from column ``m + i`` on, the
  positions it could not see). Each row sums to 1.
- ``M[i, j, l] = rows[i, l, j]`` for prompt tokens ``j < m``: the RAW share of the full row that lands on
  prompt token ``j``, not re-normalised over the prompt; ``1 - M[i, :, l].sum()`` is the share on
  earlier generated tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError


@dataclass
class Generation:
    """What :func:`attnflow.generate` returns; see the module docstring for ``rows`` and ``M``."""

    model: str
    prompt: str
    prompt_tokens: list[str]
    generated_tokens: list[str]
    completion: str
    rows: np.ndarray  # (n_new, layers, m + n_new)
    generated_ids: list[int] = field(default_factory=list)
    method: str = "rollout"
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def M(self) -> np.ndarray:
        """``(n_new, m_prompt, layers)``: raw share of each generated token's row on each prompt token."""
        return self.rows[:, :, : len(self.prompt_tokens)].transpose(0, 2, 1)

    @property
    def n_layers(self) -> int:
        return int(self.rows.shape[1])

    def token_index(self, token: Any) -> int:
        """A generated token by 0-based index (negative counts from the end, digits allowed as text)
        or by its text (first match, surrounding spaces ignored)."""
        n = len(self.generated_tokens)
        if isinstance(token, str) and token.strip().lstrip("-").isdigit():
            token = int(token.strip())
        if isinstance(token, (int, np.integer)) and not isinstance(token, bool):
            if not -n <= token < n:
                raise AttnflowError(f"token index {token} is outside the {n} generated tokens")
            return int(token) % n
        if isinstance(token, str):
            for i, piece in enumerate(self.generated_tokens):
                if piece.strip() == token.strip():
                    return i
            shown = ", ".join(repr(p) for p in self.generated_tokens[:20])
            raise AttnflowError(f"no generated token {token!r}; the generated tokens are {shown}")
        raise AttnflowError(f"token must be an index or a generated token's text; got {token!r}")

    def prompt_scores(self, i: int, layer: int | None = None) -> np.ndarray:
        """``(m,)``: generated token ``i``'s raw share on each prompt token, at ``layer`` (0-based) or
        averaged over layers when None."""
        m = self.M[self.token_index(i)]  # (m_prompt, layers)
        return m.mean(axis=1) if layer is None else m[:, layer]

    def top(self, i: int, k: int = 5, layer: int | None = None,
            content_only: bool = False) -> list[tuple[int, str, float]]:
        """The ``k`` prompt tokens generated token ``i`` draws on most (mean over layers by default).

        content_only: leave out punctuation and very common words (see :mod:`attnflow.views.words`),
        which rollout tends to rank high whatever the input (the first token gets the most).
        """
        from attnflow.explanation import ranked
        from attnflow.views.words import is_content

        keep = (lambda j: is_content(self.prompt_tokens[j])) if content_only else (lambda j: True)
        return ranked(self.prompt_scores(i, layer), self.prompt_tokens, k, keep=keep)

    def to_dict(self) -> dict[str, Any]:
        """The JSON schema issue 6's report reads (``kind``, ``model``, ``prompt``, ``prompt_tokens``,
        ``generated_tokens``, ``method``, ``M``, ``rows``) plus ``completion`` and ``params``."""
        return {
            "kind": "generation", "model": self.model, "prompt": self.prompt,
            "prompt_tokens": list(self.prompt_tokens), "generated_tokens": list(self.generated_tokens),
            "method": self.method, "M": np.asarray(self.M, dtype=float).tolist(),
            "rows": np.asarray(self.rows, dtype=float).tolist(),
            "completion": self.completion, "params": dict(self.params),
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_html(self, path: str | None = None, title: str | None = None) -> str:
        """The self-contained HTML report of this generation (no network needed); also written
        atomically to ``path`` when given."""
        from attnflow.views.report import report_html, save_report

        return save_report(self, path, title=title) if path else report_html(self, title=title)

    def plot(self, path: str, token: Any = 0, content_only: bool = False) -> str:
        """Write the bar chart (mean over layers) and prompt x layers heatmap for one generated token."""
        from attnflow.views.generation import save_generation_figure

        return save_generation_figure(self, path, token=token, content_only=content_only)
