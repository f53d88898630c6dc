"""The check part of the HTML report: per-epoch sampler facts (epoch, seed, whether the order repeats),
shard overlap per DataLoader pass (from the indices each rank fetched), and the parameter/buffer
fingerprints that drifted apart across ranks. Ranks with the same facts share one row."""

from __future__ import annotations

from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.render.html.parts import Sources, culprits_of, e, group_ranks, ranks_label, short, table

MAX_ROWS = 40
MAX_DRIFTS = 3


def section(report: Any, record: Any, src: Sources) -> str:
    if not any(r.checks or r.fingerprints for r in record.ranks.values()):
        return ""
    culprits = culprits_of(report)
    parts = [_samplers(record, culprits), _overlap(record), _drift(record, culprits)]
    body = "".join(p for p in parts if p)
    return f'<section id="check"><h2>Data, seeds and drift</h2>{body}</section>' if body else ""


def _samplers(record: Any, culprits: set[int]) -> str:
    facts: dict[tuple, dict[int, tuple]] = {}  # (ordinal, pass k) -> rank -> facts
    first: dict[tuple, str] = {}  # (rank, ordinal) -> digest of its first pass
    sites: dict[int, Any] = {}
    for r, rec in record.ranks.items():
        for c in rec.checks:
            if c.get("kind") != schema.K_SAMPLER:
                continue
            o, k = c.get("ordinal", 0), c.get("k", 0)
            d0 = first.setdefault((r, o), str(c.get("digest")))
            same = (
                "same order as its first pass"
                if k and str(c.get("digest")) == d0
                else ("first pass" if not k else "new order")
            )
            facts.setdefault((o, k), {})[r] = (c.get("epoch"), c.get("seed"), c.get("n"), same)
            sites.setdefault(o, c.get("site"))
    if not facts:
        return ""
    rows = []
    for (o, k), by_rank in sorted(facts.items()):
        for (epoch, seed, n, same), ranks in group_ranks(by_rank, culprits):
            repeat = same.startswith("same")
            rows.append(
                [
                    e(o),
                    e(k),
                    e(ranks_label(ranks)),
                    e(epoch),
                    e(seed),
                    e(n),
                    f'<b class="culprit">{e(same)}</b>' if repeat else e(same),
                ]
            )
    cut = f'<p class="small">{len(rows) - MAX_ROWS} more rows left out</p>' if len(rows) > MAX_ROWS else ""
    where = "; ".join(
        f"sampler {o} iterated at {short(s[0])}:{s[1]}"
        for o, s in sites.items()
        if isinstance(s, (list, tuple)) and len(s) >= 2
    )
    return (
        "<h3>DistributedSampler per pass (epoch)</h3>"
        + (f'<p class="small">{e(where)}</p>' if where else "")
        + table(["sampler", "pass", "ranks", "epoch (set_epoch)", "seed", "samples", "order"], rows[:MAX_ROWS])
        + cut
    )


def _overlap(record: Any) -> str:
    passes: dict[tuple, dict[int, list]] = {}
    lens: dict[tuple, Any] = {}
    for r, rec in record.ranks.items():
        for c in rec.checks:
            if c.get("kind") != schema.K_LOADER_PASS or c.get("truncated") or not isinstance(c.get("indices"), list):
                continue
            key = (c.get("ordinal", 0), c.get("k", 0))
            passes.setdefault(key, {})[r] = c["indices"]
    for rec in record.ranks.values():
        for c in rec.checks:
            if c.get("kind") == schema.K_LOADER:
                lens.setdefault(c.get("ordinal", 0), c.get("dataset_len"))
    rows = []
    for (o, k), by_rank in sorted(passes.items()):
        if len(by_rank) < 2:
            continue
        try:
            flat = [repr(i) for idx in by_rank.values() for i in idx]
        except TypeError:
            continue
        uniq = len(set(flat))
        n = lens.get(o)
        overlap = len(flat) - uniq
        gaps = (int(n) - uniq) if isinstance(n, int) and n >= uniq else None
        bad = overlap > 0 or bool(gaps)
        rows.append(
            [
                e(o),
                e(k),
                e(ranks_label(by_rank)),
                e(len(flat)),
                e(uniq),
                f'<b class="culprit">{overlap}</b>' if overlap else "0",
                "" if gaps is None else (f'<b class="culprit">{gaps}</b>' if gaps else "0"),
                e(n if n is not None else "?"),
                "overlap or gaps" if bad else "disjoint, complete",
            ]
        )
    if not rows:
        return ""
    return (
        '<h3>Shard overlap per DataLoader pass</h3><p class="small">From the sample indices each rank '
        "fetched in the pass (DistributedSampler padding counts as overlap).</p>"
        + table(
            ["loader", "pass", "ranks", "fetched", "distinct", "overlap", "never fetched", "data set", "verdict"],
            rows[:MAX_ROWS],
        )
    )


def _drift(record: Any, culprits: set[int]) -> str:
    points: dict[tuple, dict[int, dict]] = {}
    for r, rec in record.ranks.items():
        for fp in rec.fingerprints:
            points.setdefault((fp.get("model", 0), fp.get("step", 0), str(fp.get("where", ""))), {})[r] = fp
    out, shown = [], 0
    checked = 0
    for (model, step, where), by_rank in sorted(points.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(by_rank) < 2:
            continue
        checked += 1
        for kind in ("params", "buffers"):
            names = sorted({n for fp in by_rank.values() for n in (fp.get(kind) or {})})
            differ = [n for n in names if len({repr((fp.get(kind) or {}).get(n)) for fp in by_rank.values()}) > 1]
            if not differ or shown >= MAX_DRIFTS:
                continue
            shown += 1
            rows = []
            for n in differ[:6]:
                vals = {r: repr((fp.get(kind) or {}).get(n)) for r, fp in by_rank.items()}
                groups = group_ranks(vals, culprits)
                rows.append(
                    [
                        f"<code>{e(n)}</code>",
                        "<br>".join(f"{e(ranks_label(rs))}: <code>{e(v[:120])}</code>" for v, rs in groups[:6]),
                    ]
                )
            more = f'<p class="small">+{len(differ) - 6} more {kind}</p>' if len(differ) > 6 else ""
            out.append(
                f"<p><b>model {e(model)}, {e(kind)}, DDP forward {e(step)}</b> ({e(where)}): "
                f"{len(differ)} of {len(names)} differ across ranks</p>"
                + table(["tensor", "fingerprint by rank group"], rows)
                + more
            )
    if not checked:
        return ""
    head = "<h3>Parameter and buffer fingerprints</h3>"
    if not out:
        return head + f"<p>Identical on every rank at all {checked} fingerprint points.</p>"
    return head + "".join(out)
