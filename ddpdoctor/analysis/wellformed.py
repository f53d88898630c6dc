"""Damaged records set aside before any judgement, each file's said in one line. Pure.

A run directory read back may hold a record whose field has a type its writer never writes there (a disk
error, an edit, a copy cut and mended, a fuzzer): ``"t": "now"`` in a heartbeat, a site that is a dict, a
counter that is a list. The detectors read those fields as the writer wrote them; one such value made a
verdict an internal error (``ValueError: could not convert string to float: 'now'``). Here every record the
detectors read is checked against the types its writer writes (``FIELDS``: per file, per field, the kinds of
value the rank and the monitor write, as the golden run directories hold them); a record with a field of
another kind is left out (a list's entry) or dropped whole (the rank's last heartbeat, its stacks, its error),
and the report says, per file, how many it left out. A field this table does not name is not checked. Leaving
a record out never turns a verdict OK: the detectors already judge a rank without a heartbeat, a ledger with a
gap or a run without a monitor event as evidence missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ddpdoctor.record.reader import RankRecord, RunRecord


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _opt_num(v: Any) -> bool:
    return v is None or _num(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _opt_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _bool(v: Any) -> bool:
    return isinstance(v, bool) or v is None


def _list(v: Any) -> bool:
    return isinstance(v, list)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


def _opt_dict(v: Any) -> bool:
    return v is None or isinstance(v, dict)


def _site(v: Any) -> bool:
    """A user's line as the rank writes it: ``[file, line]`` or ``[file, line, function]``."""
    return (
        isinstance(v, list)
        and 2 <= len(v) <= 3
        and isinstance(v[0], str)
        and _num(v[1])
        and (len(v) < 3 or v[2] is None or isinstance(v[2], str))
    )


def _opt_site(v: Any) -> bool:
    return v is None or _site(v)


def _range(v: Any) -> bool:
    """A ledger entry's positions: ``[first, last]``."""
    return isinstance(v, list) and len(v) == 2 and all(_num(x) for x in v)


def _counts(v: Any) -> bool:
    """Per group, a position: ``{"0": 12}``."""
    return v is None or (isinstance(v, dict) and all(_num(x) for x in v.values()))


def _shapes(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, list) and all(_num(x) for x in s) for s in v)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _call(v: Any) -> bool:
    """A heartbeat's pending (or awaited) call: a ledger entry's fields, its position one number."""
    return v is None or (isinstance(v, dict) and _fits(v, PENDING))


def _threads(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(t, dict) for t in v)


Check = Callable[[Any], bool]
COMMON: dict[str, Check] = {"t": _num, "kind": _str, "rank": _opt_num, "v": _opt_num}
PENDING: dict[str, Check] = {
    "op": _str,
    "group": _opt_str,
    "seq": _opt_num,
    "shapes": _shapes,
    "dtypes": _strs,
    "site": _opt_site,
    "since": _opt_num,
}
FIELDS: dict[str, dict[str, Check]] = {
    "ledger": {
        **COMMON,
        "op": _str,
        "group": _opt_str,
        "seq": _range,
        "shapes": _shapes,
        "dtypes": _strs,
        "site": _opt_site,
        "st": _str,
        "t0": _num,
        "t1": _num,
        "s0": _num,
        "s1": _opt_num,
    },
    "heartbeat": {
        **COMMON,
        "step": _opt_num,
        "ncoll": _num,
        "seq": _counts,
        "pending": _call,
        "awaiting": _call,
        "where": _opt_site,
        "in_backward": _bool,
        "in_ddp_forward": _bool,
        "final": _bool,
        "cpu": _opt_num,
        "cost": _opt_dict,
        "digest": _opt_dict,
    },
    "events": {
        **COMMON,
        "pid": _num,
        "world_size": _num,
        "global_rank": _num,
        "local_rank": _num,
        "node_rank": _num,
        "ddp_fwd": _num,
        "ncoll": _num,
        "len": _opt_num,
        "code": _opt_num,
        "seq": _counts,
        "site": _opt_site,
        "cost": _opt_dict,
        "digest": _opt_dict,
    },
    "stacks": {**COMMON, "threads": _threads, "pid": _num, "cpu": _opt_num, "interval": _opt_num},
    "memory": {**COMMON, "step": _num, "rss": _num, "uss": _num, "it": _num},
    "timeline": {**COMMON, "t0": _num, "t1": _num, "tid": _num},
    "checks": {**COMMON, "ordinal": _opt_num, "step": _opt_num, "epoch": _opt_num},
    "fingerprints": {
        **COMMON,
        "step": _num,
        "seq": _opt_num,
        "where": _opt_str,
        "model": _opt_num,
        "params": _dict,
        "buffers": _dict,
    },
    "error": {"message": _str, "type": _str, "frames": _list, "user_frame": _opt_site, "pid": _num},
    "monitor": {**COMMON},
}
COUNTERS: dict[str, Check] = {"ddp_fwd": _num, "v": _opt_num, "kind": _str, "ended": _list}


def _any(v: Any) -> bool:
    return True


# the fields a record of a file always has (its writer writes them on every line)
REQUIRED: dict[str, tuple[str, ...]] = {"memory": ("step",), "ledger": ("op",)}


def _fits(rec: Mapping[str, Any], fields: Mapping[str, Check]) -> bool:
    return all(check(rec[k]) for k, check in fields.items() if k in rec)


def _kept(
    recs: list[dict[str, Any]], fields: Mapping[str, Check], required: tuple[str, ...] = ()
) -> tuple[list[dict[str, Any]], int]:
    good = [r for r in recs if isinstance(r, dict) and _fits(r, fields) and all(k in r for k in required)]
    return (recs, 0) if len(good) == len(recs) else (good, len(recs) - len(good))


def screen(record: RunRecord) -> tuple[RunRecord, list[str]]:
    """The record with every damaged record left out, and one line per file that had some. The record given
    is never changed (a new one where anything was left out)."""
    notes: list[str] = []
    ranks: dict[int, RankRecord] = {}
    for r, rec in record.ranks.items():
        changes: dict[str, Any] = {}
        for name in ("ledger", "events", "memory", "timeline", "checks", "fingerprints"):
            kept, left = _kept(getattr(rec, name), FIELDS[name], REQUIRED.get(name, ()))
            if left:
                changes[name] = kept
                notes.append(f"rank {r}: {left} damaged record(s) in its {name} left out (a field of the wrong kind)")
        for name, fields in (
            ("last_hb", FIELDS["heartbeat"]),
            ("stacks", FIELDS["stacks"]),
            ("error", FIELDS["error"]),
        ):
            one = getattr(rec, name)
            if one is not None and not (isinstance(one, dict) and _fits(one, fields)):
                changes[name] = None
                notes.append(
                    f"rank {r}: its {name.replace('last_hb', 'last heartbeat')} is damaged (a field of the wrong kind): left out"
                )
        counters = rec.counters if isinstance(rec.counters, dict) else {}
        good = {k: v for k, v in counters.items() if COUNTERS.get(k, _any)(v)}
        if len(good) != len(counters) or counters is not rec.counters:
            changes["counters"] = good
            notes.append(f"rank {r}: its counters are damaged (a value of the wrong kind): those left out")
        ranks[r] = dataclasses.replace(rec, **changes) if changes else rec
    monitor, left = _kept(record.monitor, FIELDS["monitor"])
    if left:
        notes.append(f"the monitor's records: {left} damaged record(s) left out (a field of the wrong kind)")
    if not notes:
        return record, []
    return dataclasses.replace(record, ranks=ranks, monitor=monitor), notes
