"""Renderers: pure functions ``Report -> str``, keyed by format. Only the CLI writes files."""

from __future__ import annotations

from typing import Callable

from ddpdoctor.analysis.findings import Report
from ddpdoctor.render import json_report, junit, text

RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": text.render,
    "json": json_report.render,
    "junit": junit.render,
}
