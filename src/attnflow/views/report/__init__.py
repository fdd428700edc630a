"""The self-contained HTML report: one file, no network, all data embedded.

    save_report(explanations, "report.html")   # or Explanation.to_html(path), ExplanationMaps.to_html(path)

See :mod:`.data` for what can be shown and :mod:`.html` for how the page is put together.
"""

from attnflow.views.report.data import load_result, payload
from attnflow.views.report.html import notebook_html, report_html, save_report

__all__ = ["load_result", "notebook_html", "payload", "report_html", "save_report"]
