"""The HTML report (``page.render``) and its per-family sections, keyed by family like every registry.

A section is ``section(report, record, sources) -> str`` (empty when the record holds none of its data).
"""

from __future__ import annotations

from typing import Any, Callable

from ddpdoctor.render.html import check, hang, memleak, profile

Section = Callable[[Any, Any, Any], str]

# family -> section, in page order
SECTIONS: dict[str, Section] = {
    "hang": hang.section,
    "memleak": memleak.section,
    "profile": profile.section,
    "check": check.section,
}
