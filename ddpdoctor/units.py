"""One way to write a size, for every figure a report, a picture or ``compare`` shows. Stdlib only."""

from __future__ import annotations


def size(n: float) -> str:
    """Bytes in binary units, two decimals: ``1.33 KiB``, ``-2.00 MiB``, ``512 B``."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{sign}{n / f:.2f} {unit}"
    return f"{sign}{n:.0f} B"
