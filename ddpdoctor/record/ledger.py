"""The collective ledger: fast parsing of its lines, folding ``coll`` and ``cend`` lines into one entry per
collective, and sharing equal ledgers between ranks. Stdlib only."""

from __future__ import annotations

import json
import re
from typing import Any

from . import schema
from .tails import Tail
from .writer import prev_path

# Ledger lines come by the thousand per rank and differ only in their times and positions: the parts that
# repeat (op, group, shapes, dtypes, call site) are decoded once and shared. A line of any other layout
# (an error, an older run) goes to json.loads.
_COLL_HEAD = b'{"v":1,"kind":"%s","rank":' % schema.K_COLL.encode()
_CEND_HEAD = b'{"v":1,"kind":"%s","rank":' % schema.K_COLL_END.encode()
_ISSUED = b',"st":"%s"}' % schema.ST_ISSUED.encode()
assert len(_COLL_HEAD) == len(_CEND_HEAD) == 28  # the offsets below
_coll_parts: dict[bytes, dict[str, Any]] = {}
_cend_parts: dict[bytes, dict[str, Any]] = {}


def fast_ledger(raw: bytes) -> dict[str, Any] | None:
    """A ledger line of the rank side's own layout, parsed without json; None for any other line."""
    try:
        if raw.startswith(_COLL_HEAD) and raw.endswith(_ISSUED):
            i = raw.index(b',"t":', 28)
            j = raw.index(b',"op":', i)
            k = raw.index(b',"seq":[', j)
            m = raw.index(b"]", k)
            n = raw.find(b',"t0":', m)  # older runs repeat the time as "t0"
            if n < 0:
                n = len(raw) - len(_ISSUED)
            key = raw[j:k] + raw[m + 1 : n]
            parts = _coll_parts.get(key)
            if parts is None:
                parts = json.loads(b"{" + key[1:] + b"}")
                if len(_coll_parts) < 100000:
                    _coll_parts[key] = parts
            a, b = raw[k + 8 : m].split(b",")
            t = float(raw[i + 5 : j])
            e = {"v": 1, "kind": schema.K_COLL, "rank": int(raw[28:i]), "t": t}
            e.update(parts)
            e["seq"] = [int(a), int(b)]
            e["t0"] = t
            e["st"] = schema.ST_ISSUED
            return e
        if raw.startswith(_CEND_HEAD) and raw.endswith(b"}"):
            i = raw.index(b',"t":', 28)
            j = raw.index(b',"group":', i)
            k = raw.index(b',"s0":', j)
            m = raw.index(b',"s1":', k)
            n = raw.index(b',"async":', m)
            key = raw[j:k] + raw[n:]
            parts = _cend_parts.get(key)
            if parts is None:
                parts = json.loads(b"{" + key[1:])
                if len(_cend_parts) < 100000:
                    _cend_parts[key] = parts
            s1 = raw[m + 6 : n]
            e = {
                "v": 1,
                "kind": schema.K_COLL_END,
                "rank": int(raw[28:i]),
                "t": float(raw[i + 5 : j]),
                "s0": int(raw[k + 6 : m]),
                "s1": None if s1 == b"null" else int(s1),
            }
            e.update(parts)
            return e
    except ValueError:
        return None
    return None


_LAST = ("", -1)  # open_'s key of the newest issued entry


def fold_ledger(
    ledger: list[dict[str, Any]], lines: list[dict[str, Any]], open_: dict[tuple, dict[str, Any]] | None = None
) -> None:
    """A collective is written when issued ("st": "issued", its position predicted). A ``cend`` line
    follows where the return says more (asynchronous, another range, the error it raised; every call in
    runs before stop 11). Ledger lines come from the training thread alone, so the next ``coll`` line
    means the one before returned: an issued entry still issued then is done (the last one is settled by
    :func:`settle_last`). Entries without "st" (older runs) are done. ``open_`` indexes the issued entries
    awaiting their end by (group, s0) (kept across calls by the incremental reader; at most 64, the oldest
    dropped); a ``cend`` whose ``coll`` was rotated away is dropped."""
    if open_ is None:
        open_ = {}
    end = schema.K_COLL_END
    issued, done = schema.ST_ISSUED, schema.ST_DONE
    for e in lines:
        if e.get("kind") != end:
            if "t0" not in e:
                e["t0"] = e.get("t")
            prev = open_.pop(_LAST, None)
            if prev is not None and prev.get("st") == issued:
                prev["st"] = done
            ledger.append(e)
            rng = e.get("seq")
            if e.get("st") == issued and rng:
                open_[(e.get("group"), rng[0])] = e
                if len(open_) > 64:
                    del open_[next(iter(open_))]
                open_[_LAST] = e
            continue
        c = open_.pop((e.get("group"), e.get("s0")), None)
        if c is None:
            continue
        if e.get("s1") is not None:
            c["seq"] = [c["seq"][0], int(e["s1"])]
        c["t1"] = e.get("t")
        c["err"] = e.get("err")
        c["st"] = schema.ST_ERROR if e.get("err") else (schema.ST_ASYNC if e.get("async") else schema.ST_DONE)


def settle_last(ledger: list[dict[str, Any]], counters: dict[str, Any]) -> None:
    """The newest entry, still issued, returned if the rank's counters name it (group, position) as the
    last routine collective that ended (replaced by a copy: an entry shared between ranks never changes)."""
    if ledger and ledger[-1].get("st") == schema.ST_ISSUED:
        last, ended = ledger[-1], counters.get("ended")
        rng = last.get("seq")
        if isinstance(ended, list) and len(ended) == 2 and rng and [last.get("group"), rng[0]] == ended:
            ledger[-1] = dict(last, st=schema.ST_DONE)


# what differs between the ledgers of ranks that made the same collectives: the rank and the times
_VOLATILE = re.compile(rb'"rank":-?\d+,"t":[-+.\deE]+|"t0":[-+.\deE]+|"t1":[-+.\deE]+')


def read_ledger_shared(path: str, share: dict[tuple, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], bool, bool]:
    """A rank's whole ledger ring (previous segment, then the current one), folded. At scale most ranks
    made the same collectives from the same lines: a ledger equal to one already read but for the rank
    and the times shares that one's entries (their ``rank`` and times are the first such rank's), which
    keeps ``analyze`` of thousands of ranks linear in the distinct ledgers, not in all lines. The third
    value: the ring ends in a cut line (left out; the report says the records are incomplete)."""
    chunks = []
    trimmed = False
    for p in (prev_path(path), path):
        try:
            with open(p, "rb") as f:
                chunk = f.read()
            z = chunk.find(b"\0")  # a memory-mapped segment's unwritten rest (writer.MappedRingWriter)
            chunks.append(chunk if z < 0 else chunk[:z])
            if p != path:
                trimmed = True  # rotated at least once: older collectives may be gone
        except OSError:
            pass
    data = b"".join(chunks)
    end = data.rfind(b"\n") + 1
    cut = bool(data[end:].strip())
    data = data[:end]  # a line cut by a kill stays out (as the incremental reader skips it)
    stripped = _VOLATILE.sub(b"", data)
    key = (len(stripped), hash(stripped), trimmed)
    got = share.get(key)
    if got is not None:
        return list(got), trimmed, cut
    t = Tail(path, fast=fast_ledger)
    ledger: list[dict[str, Any]] = []
    fold_ledger(ledger, t._parse(data), {})
    share[key] = ledger
    return list(ledger), trimmed, cut
