"""The running digest of a rank's collective sequence (issue 10), shared by both sides.

Per process group a rank keeps ``[count, digest]`` over its Python-level collectives (the calls the
ledger records; DDP's own all-reduces from C++ are not among them; point-to-point calls neither, as a
sender and its receiver legitimately differ): ``count`` calls so far, and
``digest = fold(digest, op_hash(op, shapes_text(shapes), site))`` over them, starting at 0. As in the
divergence analysis, shapes count only for the ops whose shapes must agree (``schema.SHAPED``). The call
line counts too (file name and line, not the directory: nodes may run different checkouts): under gloo
a rank that makes one extra call of the same op and shape goes on in lockstep, shifted by one, and only
the lines it called from tell it apart. Ranks that made the
same Python-level calls (op and described shapes) in the same order have the same ``[count, digest]``.
The heartbeat and the finish event carry it now (``digest``) and at the start of the oldest ledger
segment still on disk (``digest0``), so the analysis can compare ranks at the window's start and fold
each rank's kept ledger forward from there. Deterministic across processes (crc32, not ``hash``).
"""

from __future__ import annotations

import os
import zlib
from typing import Any

from ddpdoctor.record.schema import P2P, SHAPED

COUNTED_OUT = P2P  # ops outside the digest

MUL = 1000003
MASK = (1 << 53) - 1  # exact in any JSON reader


def shapes_text(shapes: Any) -> str:
    """The shapes as the ledger line writes them: ``[[2,3],[4]]``."""
    return "[" + ",".join("[" + ",".join(map(str, sh)) + "]" for sh in (shapes or ())) + "]"


def op_hash(op: str, shp: str, site: Any) -> int:
    """The hash of one call: its op, its shapes' text for an op whose shapes must agree, its call line
    (``site``: [file, line, function] as the ledger writes it, or None)."""
    where = f"{os.path.basename(str(site[0]))}:{site[1]}" if site else ""
    return zlib.crc32(f"{op}{shp if op in SHAPED else ''}|{where}".encode())


def fold(d: int, h: int) -> int:
    return (d * MUL ^ h) & MASK
