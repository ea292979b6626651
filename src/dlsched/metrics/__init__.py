"""Turning SimResults into things people read: comparison tables, JSON rows and a report folder."""

from dlsched.metrics.report import write_report
from dlsched.metrics.table import comparison_table, render_table, summary_rows

__all__ = ["comparison_table", "render_table", "summary_rows", "write_report"]
