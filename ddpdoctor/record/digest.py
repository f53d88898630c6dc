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


# -- the recorder's chunks (issue 54) ---------------------------------------------------------------------
# Under the default, torch's flight recorder is the rank's record and the wrappers keep no running digest. Its
# ring (TORCH_FR_BUFFER_SIZE entries) wraps; so the rank's heartbeat reads the ring, with frames, about once per
# half a ring of calls (no more than CHUNK_SHARE of one core: rank/flight.py), and keeps for every whole chunk of
# a group's positions it saw its digest and how many calls of each op each line made. The analysis compares the
# ranks' chunks before the ring's window (analysis/hang/digest.py): the first chunk that differs says where the
# sequences parted, and its counts say which rank made which call more often, at which line.


def chunk_size(buffer: int) -> int:
    """Positions per chunk for a ring of ``buffer`` entries: a quarter of the ring, between 4 and 512, so that
    reads half a ring of calls apart find every chunk whole in one of them, with a quarter of a ring to spare."""
    return max(4, min(512, buffer // 4))


def call_key(e: dict[str, Any]) -> tuple[int, str]:
    """A recorded call's hash (as :func:`op_hash`) and its count key ``"op file:line"``. DDP's bucket
    all-reduces (``by: autograd``) count without a line: where backward was called is not part of the sequence."""
    op = str(e.get("op", "?"))
    site = None if e.get("by") == "autograd" else e.get("site")
    where = f"{os.path.basename(str(site[0]))}:{site[1]}" if site else "(autograd)" if e.get("by") else "?"
    return op_hash(op, shapes_text(e.get("shapes")), site), f"{op} {where}"


def chunks_of(
    entries: list[dict[str, Any]], wrapped: bool, size: int, have: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, list]]:
    """The whole chunks in one read of the recorder, per group: ``{group: {k: [digest, {"op file:line": n}]}}``,
    chunk ``k`` holding positions ``k*size+1`` to ``(k+1)*size``. ``entries``: the read's collectives as ledger
    entries (record/flight.py ``entries``: p2p left out, one per position); ``wrapped``: the ring dropped its
    oldest entries, so a group is whole only from its oldest position held (unwrapped: from position 1). Chunks
    already in ``have`` are not folded again."""
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for e in entries:
        seq = e.get("seq")
        if isinstance(seq, list) and seq and isinstance(seq[0], int):
            by.setdefault(str(e.get("group")), {})[seq[0]] = e
    out: dict[str, dict[str, list]] = {}
    for g, at in by.items():
        lo, hi = (min(at) if wrapped else 1), max(at)
        old = (have or {}).get(g) or {}
        for k in range((lo - 1 + size - 1) // size, hi // size):
            if str(k) in old:
                continue
            d, counts = 0, dict[str, int]()
            for pos in range(k * size + 1, (k + 1) * size + 1):
                call = at.get(pos)
                if call is None:
                    continue  # a p2p op's position (gloo counts them, records none)
                h, key = call_key(call)
                d = fold(d, h)
                counts[key] = counts.get(key, 0) + 1
            out.setdefault(g, {})[str(k)] = [d, counts]
    return out
