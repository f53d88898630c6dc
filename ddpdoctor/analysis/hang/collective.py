"""Collectives that completed wrongly: ranks passed tensors of different shape to the same collective
position and the run went on. gloo aborts on most such calls; NCCL (and any backend that completes
collectives asynchronously) may complete them with wrong data or hang much later, so a run that finished
is not a run that was right. Pure.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, group_values
from ddpdoctor.analysis.ids import COLLECTIVE_SHAPE_MISMATCH
from ddpdoctor.analysis.state import describe_op, loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

# ops whose tensors must have the same shape and dtype on every rank
MUST_AGREE = frozenset({"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor"})

HINT = (
    "Every rank must pass tensors of the same shape and dtype to all_reduce, broadcast, reduce and "
    "all_gather: pad to a common size (all_gather the sizes first), or use all_gather_object for "
    "ragged data. On NCCL such a call does not fail: it corrupts the result or hangs later."
)


def _positions(record: RunRecord, rank: int) -> dict[tuple[str, int], dict[str, Any]]:
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for e in record.ranks[rank].ledger:
        rng = e.get("seq")
        if e.get("op") in MUST_AGREE and rng and rng[0] == rng[1] and e.get("st") != "error":
            out[(str(e.get("group")), int(rng[0]))] = e
    return out


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """The first collective position where ranks passed different shapes, in a run that went on."""
    if record.monitor_event(schema.K_VERDICT) is not None or any(r.error for r in record.ranks.values()):
        return []  # a hang or a crash: the hang detector explains the mismatch with its consequence
    ranks = sorted(record.ranks)
    if len(ranks) < 2:
        return []
    pos = {r: _positions(record, r) for r in ranks}
    common = set.intersection(*(set(p) for p in pos.values()))
    for key in sorted(common, key=lambda k: (k[1], k[0])):
        entries = {r: pos[r][key] for r in ranks}
        if len({e.get("op") for e in entries.values()}) != 1:
            continue  # different calls at one position: not a shape question
        sig = {r: (tuple(map(tuple, e.get("shapes") or ())), tuple(e.get("dtypes") or ())) for r, e in entries.items()}
        if len(set(sig.values())) == 1:
            continue
        op = next(iter(entries.values())).get("op")
        text = group_values(
            {
                r: f"{describe_op(op, e.get('shapes'))} {'/'.join(e.get('dtypes') or ())}".strip()
                for r, e in entries.items()
            }
        )
        locs: list[Location] = [l for r, e in entries.items() if (l := loc(r, e.get("site"), "mismatched"))]
        return [
            Finding(
                COLLECTIVE_SHAPE_MISMATCH,
                "error",
                f"ranks passed different shapes to {op} #{key[1]} of group {key[0]} and the run went on: "
                f"{text}; the result is wrong (NCCL does not check)",
                HINT,
                tuple(ranks),
                tuple(locs),
                {"group": key[0], "seq": key[1], "shapes": {str(r): entries[r].get("shapes") for r in ranks}},
                culprits=tuple(ranks),
            )
        ]
    return []
