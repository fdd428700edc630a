"""Views: terminal tables, figures and the HTML report. They take results, never models.

Importing this package registers the presenter that gives every
``Attribution`` its ``plot``, ``to_html``, ``table`` and ``print``; the
figure and report modules are imported only when something is drawn (matplotlib is slow to load).
"""

from __future__ import annotations

import io
from typing import Any

from attnflow.results.presenter import register


def plot(result: Any, path: Any = None, **options: Any) -> Any:
    """The kind's figure: layers x tokens panels (text), bars + prompt x layers map for one generated
    token (generation), overlays (image), targets x sources + one target's layers x sources
    (seq2seq). ``options`` go to the figure function of that kind. With ``path`` the figure is
    written there (format from the suffix) and the path returned; without, the matplotlib Figure is
    returned (a notebook shows it; text results also draw into ``ax=``)."""
    if path is None:
        return figure(result, **options)
    if result.kind == "generation":
        from attnflow.views.generation import save_generation_figure

        return save_generation_figure(result, path, **options)
    if result.kind == "seq2seq":
        from attnflow.views.seq2seq import save_seq2seq_figure

        return save_seq2seq_figure(result, path, **options)
    if result.kind == "image":
        from attnflow.views.image import save_overlays

        return save_overlays([result], path, **options)
    from attnflow.views.heatmap import save_heatmaps

    return save_heatmaps(result, path, **options)


def figure(result: Any, **options: Any) -> Any:
    """The matplotlib Figure ``plot`` would write (``dpi`` is for files and is ignored here). A new
    figure is handed back already closed in pyplot, so a notebook shows it once (as the returned
    value), not a second time when the cell ends; one drawn into the caller's ``ax`` is left as it is."""
    options.pop("dpi", None)
    drawn = _figure(result, **options)
    if options.get("ax") is None:
        from attnflow.views.files import pyplot

        pyplot().close(drawn)
    return drawn


def _figure(result: Any, **options: Any) -> Any:
    if result.kind == "generation":
        from attnflow.views.generation import generation_figure

        return generation_figure(result, **options)
    if result.kind == "seq2seq":
        from attnflow.views.seq2seq import seq2seq_figure

        return seq2seq_figure(result, **options)
    if result.kind == "image":
        from attnflow.views.image import overlay_figure

        return overlay_figure([result], **options)
    from attnflow.views.heatmap import heatmap_figure

    return heatmap_figure(result, **options)


class _Presenter:
    """What ``Attribution`` calls to draw itself."""

    plot = staticmethod(plot)

    @staticmethod
    def html(result: Any, path: Any = None, title: str | None = None) -> str:
        from attnflow.views.report import report_html, save_report

        if path is None:
            return report_html(result, title=title)
        save_report(result, path, title=title)
        return str(path)

    @classmethod
    def mimebundle(cls, result: Any) -> dict[str, str]:
        """What a notebook cell shows: the interactive report (``text/html``, an isolated iframe), the
        kind's figure as ``image/png`` (what static viewers such as GitHub's show of a saved notebook)
        and the top-tokens table as ``text/plain``."""
        import base64

        png = io.BytesIO()
        figure(result).savefig(png, format="png", dpi=90, bbox_inches="tight")
        return {"text/html": cls.notebook(result), "image/png": base64.b64encode(png.getvalue()).decode("ascii"),
                "text/plain": cls.text(result)}

    @staticmethod
    def notebook(result: Any) -> str:
        from attnflow.views.report import notebook_html

        return notebook_html(result)

    @staticmethod
    def table(result: Any, k: int = 5, **options: Any) -> Any:
        from attnflow.views.table import result_table

        return result_table(result, k, **options)

    @classmethod
    def print(cls, result: Any, k: int = 5, **options: Any) -> None:
        from rich.console import Console

        Console().print(cls.table(result, k, **options))

    @classmethod
    def text(cls, result: Any) -> str:
        from attnflow.views.table import render_text

        return render_text(cls.table(result))


register(_Presenter())

__all__ = ["plot"]
