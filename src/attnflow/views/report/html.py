"""Assemble the report page: the template, inline CSS and JS, and the data as a JSON block.

Everything is inline and the page carries a Content-Security-Policy that forbids any network
access, so it opens the same from a laptop, an e-mail attachment or an air-gapped machine.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

from attnflow.results.files import write_text
from attnflow.views.report.data import payload


def _asset(name: str) -> str:
    return resources.files("attnflow.views.report").joinpath(name).read_text(encoding="utf-8")


def json_block(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` only occur inside
    JSON strings, where their ``\\uXXXX`` escapes mean the same, so no token can close the block."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def report_html(result: Any, title: str | None = None) -> str:
    """The report for ``result`` (see ``attnflow.views.report.payload``) as one HTML string."""
    data = payload(result, title)
    # Targets the page does not open on travel as separate blocks, read only when one is clicked
    # (base64 text cannot close a script element).
    chunks = "".join(f'<script type="application/octet-stream" id="attnflow-chunk-{key}">{text}</script>\n'
                     for key, text in data.pop("chunks").items())
    parts = {"TITLE": html.escape(data["title"]), "CSS": _asset("report.css"), "JS": _asset("report.js"),
             "DATA": json_block(data), "CHUNKS": chunks}
    # One pass over the template only: substituted text (a token could read "@@DATA@@") is never rescanned.
    return re.sub(r"@@([A-Z]+)@@", lambda m: parts[m.group(1)], _asset("report.html"))


def save_report(result: Any, path: str, title: str | None = None) -> str:
    """Write the report to ``path`` atomically; returns the HTML."""
    text = report_html(result, title)
    write_text(path, text)
    return text


def notebook_html(result: Any, height: int = 620) -> str:
    """The report inside an ``<iframe srcdoc>``, so that in a notebook its ids, styles and script stay
    apart from the notebook's and from other reports on the same page."""
    page = html.escape(report_html(result), quote=True)
    return (f'<iframe srcdoc="{page}" style="width:100%;height:{int(height)}px;border:1px solid #ddd" '
            'sandbox="allow-scripts"></iframe>')
