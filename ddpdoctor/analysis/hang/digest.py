"""Did the ranks' collective sequences differ before the ledger window every rank still holds? Pure.

A long run keeps only the ledger's last segments (issue 10). Each rank also writes, per process group,
the count and running digest of its Python-level collectives now (``digest``) and at the start of its
oldest kept segment (``digest0``; record/digest.py). The window every rank still holds starts at the
latest of the ranks' first kept calls (count ``C``): each rank's digest at ``C`` is its ``digest0``
folded forward over its kept ledger entries. Ranks with different digests at ``C`` made different calls
(or a different number of them) before the window: a divergence there is out of the ledger's sight,
and a divergence found inside the window may only be its consequence.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.record import schema
from ddpdoctor.record.digest import COUNTED_OUT, fold, op_hash, shapes_text
from ddpdoctor.record.reader import RunRecord


def _digests(rec: Any) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """(digest, digest0) of a rank: from its finish event, else its latest heartbeat."""
    for src in (rec.event(schema.K_FINISH), rec.last_hb):
        if src and isinstance(src.get("digest"), dict):
            d0 = src.get("digest0")
            return src["digest"], d0 if isinstance(d0, dict) else None
    return None


def _at(c0: int, d0: int, entries: list[dict[str, Any]], count: int) -> int:
    """The digest after ``count`` calls, folded from ``(c0, d0)`` over the kept entries."""
    d = d0
    cache: dict[tuple, int] = {}
    for e in entries[: count - c0]:
        site = e.get("site")
        key = (e.get("op", "?"), shapes_text(e.get("shapes")), tuple(site[:2]) if site else None)
        h = cache.get(key)
        if h is None:
            h = cache[key] = op_hash(key[0], key[1], site)
        d = fold(d, h)
    return d


def before_window(record: RunRecord) -> dict[str, Any] | None:
    """``{"group", "count", "kept", "digests": {digest: [ranks]}}`` for the first process group whose ranks'
    digests at the start of the common window differ; None when every rank's ledger is whole, when the
    digests agree, or when a rank's ledger and digest do not line up (an older run, a partial read)."""
    info: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for r, rec in record.ranks.items():
        got = _digests(rec)
        if got is not None:
            info[r] = (got[0], got[1] or {})
    if len(info) < 2 or not any(d0 for _d, d0 in info.values()):
        return None  # no ring rotated past its first segment: the ledgers hold every call
    groups = sorted({g for now, _d0 in info.values() for g in now})
    for g in groups:
        state: dict[int, tuple[int, int, list, int]] = {}
        for r, (now, d0) in info.items():
            if g not in now:
                continue
            c0, dg0 = (d0.get(g) or [0, 0])[:2]
            cn = int(now[g][0])
            entries = [
                e
                for e in record.ranks[r].ledger
                if e.get("group") == g
                and e.get("kind", "coll") == "coll"
                and "op" in e
                and e["op"] not in COUNTED_OUT
                and e.get("src") != "flight"  # the digest folds the wrappers' calls: the recorder's are not in it
            ]
            if int(c0) + len(entries) != cn:
                continue  # this rank's kept ledger does not start where its digest0 says: no judgement
            state[r] = (int(c0), int(dg0), entries, cn)
        if len(state) < 2:
            continue
        start = max(c0 for c0, _d, _e, _n in state.values())
        if start == 0:
            continue
        ranks = [r for r, (_c0, _d, _e, cn) in state.items() if cn >= start]
        if len(ranks) < 2:
            continue
        by: dict[int, list[int]] = {}
        for r in ranks:
            c0, dg0, entries, _cn = state[r]
            by.setdefault(_at(c0, dg0, entries, start), []).append(r)
        if len(by) > 1:
            kept = min(state[r][3] for r in ranks) - start
            return {"group": g, "count": start, "kept": kept, "digests": {str(d): sorted(rs) for d, rs in by.items()}}
    return None


def sentence(info: dict[str, Any]) -> str:
    """What a finding says about a divergence before the window."""
    parts = sorted(info["digests"].values(), key=len, reverse=True)
    who = " vs ".join(ranks_phrase(rs) for rs in parts)
    return (
        f"the ranks' collective sequences of group {info['group']} already differed before the last "
        f"{info['kept']} collectives kept ({who} differ in op, shapes or call line within their first "
        f"{info['count']} Python-level calls): raise DDPDOCTOR_LEDGER_RING to keep the first divergence in sight"
    )


def recorder_window(record: RunRecord) -> dict[str, Any] | None:
    """``{"group", "first", "ranks"}`` for the first process group whose calls some rank left to torch's flight
    recorder (the default, ``DDPDOCTOR_COLLECTIVES=recorder``) and whose ring wrapped (its oldest entry's id,
    ``flight.json``'s ``first_record``, is above 0) and no longer holds that rank's first call: the recorder keeps no running digest, so a divergence before ``first`` (the latest of those ranks'
    oldest recorded positions) is out of sight. None when every such ring still holds its group's first call."""
    oldest: dict[str, dict[int, int]] = {}
    for r, rec in record.ranks.items():
        init = rec.event(schema.K_INIT)
        if not (init and init.get("recorded")) or not isinstance(rec.flight, dict):
            continue
        if not (isinstance(rec.flight.get("first_record"), int) and rec.flight["first_record"] > 0):
            continue  # the ring never wrapped: it holds every call (a first position above 1 is a p2p op's)
        for e in rec.ledger:
            if e.get("src") != "flight" or not e.get("seq"):
                continue
            g, pos = str(e.get("group")), int(e["seq"][0])
            if pos < oldest.setdefault(g, {}).get(r, pos + 1):
                oldest[g][r] = pos
    for g in sorted(oldest):
        wrapped = {r: p for r, p in oldest[g].items() if p > 1}
        if wrapped:
            return {"group": g, "first": max(wrapped.values()), "ranks": sorted(wrapped)}
    return None


def recorder_sentence(info: dict[str, Any]) -> str:
    """What a hang finding says when torch's ring no longer holds a group's first calls."""
    return (
        f"torch's flight recorder of {ranks_phrase(info['ranks'])} holds group {info['group']}'s calls from "
        f"#{info['first']} on: a divergence before it is out of sight (raise TORCH_FR_BUFFER_SIZE, or set "
        "DDPDOCTOR_COLLECTIVES=wrappers for a running digest of every call)"
    )


def annotate(findings: list[Finding], record: RunRecord) -> list[Finding]:
    """The hang findings with the sentence and ``evidence["before_window"]`` when the ranks' sequences
    already differed before the window every rank's ledger holds, or with ``evidence["recorder_window"]`` when
    a rank's calls were left to torch's recorder and its ring no longer holds the first of them (only computed
    for a hang finding)."""
    if not any(f.id.startswith("hang.") for f in findings):
        return findings
    info = before_window(record)
    key, text = "before_window", sentence
    if info is None:
        info = recorder_window(record)
        key, text = "recorder_window", recorder_sentence
    if info is None:
        return findings
    out = []
    for f in findings:
        if f.id.startswith("hang."):
            f = Finding(
                f.id,
                f.severity,
                f"{f.message}; {text(info)}",
                f.hint,
                f.ranks,
                f.locations,
                dict(f.evidence, **{key: info}),
                f.culprits,
            )
        out.append(f)
    return out
