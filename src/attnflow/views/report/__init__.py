"""The self-contained HTML report: one file, no network, all data embedded.

    result.to_html("report.html")      # or save_report(result, "report.html")

See ``.data`` for what the page is given and ``.html`` for how the page is put together.
"""

from attnflow.views.report.data import payload
from attnflow.views.report.html import notebook_html, report_html, save_report

__all__ = ["notebook_html", "payload", "report_html", "save_report"]
