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

from ddpdoctor.analysis.findings import Finding, Location, ranks_phrase
from ddpdoctor.analysis.hang.hints import hint_for
from ddpdoctor.analysis.ids import HANG_RANK_CONDITIONAL_COLLECTIVE
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


def _oldest(record: RunRecord) -> dict[str, dict[int, int]]:
    """Per group, per rank whose calls were left to torch's recorder and whose ring wrapped (``flight.json``'s
    ``first_record`` above 0), the oldest position the ring still holds."""
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
    return oldest


def _chunks(rec: Any) -> tuple[int, dict[str, Any]] | None:
    """(chunk size, {group: {k: [digest, counts]}}) from a rank's ``flight.json`` (rank/flight.py ``Chunks``)."""
    got = rec.flight.get("chunks") if isinstance(rec.flight, dict) else None
    if not isinstance(got, dict) or not isinstance(got.get("size"), int) or not isinstance(got.get("groups"), dict):
        return None
    return got["size"], got["groups"]


def _more(counts: dict[int, dict[str, int]]) -> list[dict[str, Any]]:
    """Which rank made which call (``"op file:line"``) more often than the others, in one chunk; ``only``: some
    rank made none of it there."""
    keys = sorted({k for c in counts.values() for k in c})
    out = []
    for key in keys:
        low = min(int(c.get(key, 0)) for c in counts.values())
        for r in sorted(counts):
            n = int(counts[r].get(key, 0)) - low
            if n > 0:
                out.append({"rank": r, "call": key, "more": n, "only": low == 0})
    return out


def proven_extra(record: RunRecord, info: dict[str, Any]) -> tuple[list[int], str, str, int] | None:
    """``(ranks, op, file, line)`` where the chunk at which the ranks parted before the ring proves a call made
    on some ranks only: one line's call that those ranks made there and the others never made, in any chunk
    or in the calls the recorder still holds (a line every rank calls now and then, left out once by one rank,
    is not proven either way). None otherwise."""
    only = [m for m in info["more"] if m["only"] and not m["call"].endswith((" ?", " (autograd)"))]
    calls = {m["call"] for m in only}
    if len(calls) != 1:
        return None
    call = calls.pop()
    odd = sorted({m["rank"] for m in only})
    g = info["group"]
    ranks = sorted({r for rs in info["digests"].values() for r in rs})
    others = [r for r in ranks if r not in odd]
    if not others:
        return None
    op, where = call.split(" ", 1)
    base, _, line = where.rpartition(":")
    for r in others:
        got = _chunks(record.ranks[r])
        for chunk in (got[1].get(g) or {}).values() if got else ():
            if isinstance(chunk, list) and len(chunk) == 2 and isinstance(chunk[1], dict) and chunk[1].get(call):
                return None
        for e in record.ranks[r].ledger:
            site = e.get("site")
            if str(e.get("group")) == g and e.get("op") == op and site and str(site[1]) == line:
                if str(site[0]).rsplit("/", 1)[-1] == base:
                    return None
    path = base
    for r in odd:  # the full path, as the rank's own records write it
        for e in record.ranks[r].ledger:
            site = e.get("site")
            if site and str(site[0]).rsplit("/", 1)[-1] == base:
                path = str(site[0])
                break
    return odd, op, path, int(line) if line.isdigit() else 0


def recorder_window(record: RunRecord) -> tuple[str, dict[str, Any]] | None:
    """What the recorder's chunks say before the ring's window, for the first process group whose calls some
    rank left to torch's flight recorder (the default) and whose ring wrapped, no longer holding that rank's
    first call (``first``: the latest of those ranks' oldest positions held).

    - ``("before_ring", {"group", "first", "from", "to", "digests", "more"})``: the ranks' chunks (rank/flight.py
      ``Chunks``) differ at positions ``from``-``to``, before the window: the sequences had parted there,
      and ``more`` says which rank made which call more often, at which line;
    - ``("recorder_window", {"group", "first", "ranks", "unread"})``: a chunk before the window is missing on
      some rank (its reads fell behind the calls, or a run from before the chunks): a divergence there is out
      of sight;
    - None: every ring still holds its group's first call, or every chunk before the window was read on every
      rank and they agree."""
    oldest = _oldest(record)
    for g in sorted(oldest):
        wrapped = {r: p for r, p in oldest[g].items() if p > 1}
        if not wrapped:
            continue
        first = max(wrapped.values())
        ranks = sorted(
            r
            for r, rec in record.ranks.items()
            if any(e.get("src") == "flight" and str(e.get("group")) == g for e in rec.ledger)
        )
        got = {r: _chunks(record.ranks[r]) for r in ranks}
        sizes = {c[0] for c in got.values() if c is not None}
        size = sizes.pop() if len(sizes) == 1 else 0
        unread: list[int] | None = None
        if size and all(c is not None for c in got.values()):
            for k in range((first - 2) // size + 1):
                have = {r: c[1].get(g, {}).get(str(k)) for r, c in got.items() if c is not None}
                present = {r: v for r, v in have.items() if isinstance(v, list) and len(v) == 2}
                if len(present) < len(have) and unread is None:
                    unread = [k * size + 1, (k + 1) * size]
                by: dict[str, list[int]] = {}
                for r, v in present.items():
                    by.setdefault(str(v[0]), []).append(r)
                if len(by) > 1:
                    info = {
                        "group": g,
                        "first": first,
                        "from": k * size + 1,
                        "to": (k + 1) * size,
                        "digests": by,
                        "more": _more({r: v[1] if isinstance(v[1], dict) else {} for r, v in present.items()}),
                    }
                    return "before_ring", info
            if unread is None:
                continue  # every chunk before the window read on every rank, and they agree
        return "recorder_window", {"group": g, "first": first, "ranks": sorted(wrapped), "unread": unread}
    return None


def recorder_sentence(info: dict[str, Any]) -> str:
    """What a hang finding says when torch's ring no longer holds a group's first calls and no chunk tells."""
    unread = f" (no read of #{info['unread'][0]}-#{info['unread'][1]})" if info.get("unread") else ""
    return (
        f"torch's flight recorder of {ranks_phrase(info['ranks'])} holds group {info['group']}'s calls from "
        f"#{info['first']} on{unread}: a divergence before it is out of sight (raise TORCH_FR_BUFFER_SIZE, or set "
        "DDPDOCTOR_COLLECTIVES=wrappers for a running digest of every call)"
    )


def before_ring_sentence(info: dict[str, Any]) -> str:
    """What a hang finding says when the recorder's chunks show the ranks parted before the ring's window."""
    more = [m for m in info["more"] if m["only"]] or info["more"]
    if more:
        who = "; ".join(
            f"rank {m['rank']} made {m['more']} {'' if m['only'] else 'more '}{m['call'].split(' ', 1)[0]} at "
            f"{m['call'].split(' ', 1)[-1]}{' where the others made none' if m['only'] else ''}"
            for m in more[:4]
        )
    else:
        who = "the same calls in another order"
    parts = sorted(info["digests"].values(), key=len, reverse=True)
    return (
        f"the ranks' calls on group {info['group']} already differed at #{info['from']}-#{info['to']}, before the "
        f"calls torch's flight recorder still holds (#{info['first']} on; "
        f"{' vs '.join(ranks_phrase(rs) for rs in parts)}): {who}"
    )


def annotate(findings: list[Finding], record: RunRecord) -> list[Finding]:
    """The hang findings with the sentence and ``evidence["before_window"]`` when the ranks' sequences
    already differed before the window every rank's ledger holds, or with ``evidence["recorder_window"]`` when
    a rank's calls were left to torch's recorder and its ring no longer holds the first of them, or with
    ``evidence["before_ring"]`` when the recorder's chunks show where the ranks parted before it (only computed
    for a hang finding)."""
    if not any(f.id.startswith("hang.") for f in findings):
        return findings
    info = before_window(record)
    key, text = "before_window", sentence
    if info is None:
        got = recorder_window(record)
        if got is None:
            return findings
        key, info = got
        text = before_ring_sentence if key == "before_ring" else recorder_sentence
    extra = proven_extra(record, info) if key == "before_ring" else None
    out = []
    for f in findings:
        if extra is not None and f.id.startswith("hang.") and f.culprits != tuple(extra[0]):
            f = _rewritten(record, f, info, extra)
        elif f.id.startswith("hang."):
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


def _rewritten(record: RunRecord, f: Finding, info: dict[str, Any], extra: tuple[list[int], str, str, int]) -> Finding:
    """The hang finding read again where the recorder's chunks prove a call made on some ranks only, before the
    ring's window: every call since was shifted, so what the window shows (a rank gone on, or left early) is its
    consequence. The call is the culprit; the window's places stay as the ranks' waits."""
    odd, op, path, line = extra
    culprit = [Location(r, path, line, "", "diverged") for r in odd]
    waits = [Location(l.rank, l.file, l.line, l.func, "victim") for l in f.locations if l.rank not in odd]
    waits += [Location(l.rank, l.file, l.line, l.func, "waiting") for l in f.locations if l.rank in odd]
    seen: set[tuple[int, str, int]] = set()
    locs = []
    for l in culprit + waits:
        if (l.rank, l.file, l.line) not in seen:
            seen.add((l.rank, l.file, l.line))
            locs.append(l)
    others = sorted({r for rs in info["digests"].values() for r in rs} - set(odd))
    msg = (
        f"a collective is called on some ranks only: {ranks_phrase(odd)} called {op} at "
        f"{path.rsplit('/', 1)[-1]}:{line} (group {info['group']}, #{info['from']}-#{info['to']}, before the calls "
        f"torch's flight recorder still holds: #{info['first']} on), which {ranks_phrase(others)} never called; "
        f"every call since was shifted, and the run stopped where the window's reading says: {f.message}"
    )
    how = {"group": info["group"], "seq": info["from"], "diverged": odd, "how": "the recorder's chunks: extra call"}
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        msg,
        hint_for(record, HANG_RANK_CONDITIONAL_COLLECTIVE),
        tuple(sorted(set(f.ranks) | set(odd) | set(others))),
        tuple(locs),
        dict(f.evidence, before_ring=info, divergence=how, window_finding=f.id),
        culprits=tuple(odd),
    )
