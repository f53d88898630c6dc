"""Shards judged from what each rank's DataLoader iterators really fetched (``loader_pass`` records). Pure."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ddpdoctor.analysis.check.records import RankData, _framework_hint
from ddpdoctor.analysis.findings import Finding, Location, ranks_phrase
from ddpdoctor.analysis.ids import DATA_SHARD_GAPS, DATA_SHARD_OVERLAP
from ddpdoctor.analysis.state import loc
from ddpdoctor.record.reader import RunRecord

FETCH_KEYS = 16  # matched training passes compared per run (the rank side keeps indices for 8 passes a loader)


def _lp_trained(d: RankData, lp: dict[str, Any]) -> bool:
    return bool(lp.get("steps")) if d.has_optimizer else bool(lp.get("steps") or lp.get("fwds"))


def _fetched_passes(d: RankData) -> dict[tuple, tuple[dict, dict]]:
    """Training loader passes keyed so that ranks can be matched: (loader site, n-th loader built at that
    site, pass number) -> (loader event, loader_pass event)."""
    by_ord: dict[int, dict] = {}
    nth: dict[tuple, int] = defaultdict(int)
    keys: dict[int, tuple] = {}
    for l in d.loaders:
        o = int(l.get("ordinal", -1))
        site = tuple((l.get("site") or [None, None])[:2])
        keys[o] = (site, nth[site])
        nth[site] += 1
        by_ord[o] = l
    out: dict[tuple, tuple[dict, dict]] = {}
    for lp in d.lpasses:
        o = int(lp.get("ordinal", -1))
        if o in by_ord and _lp_trained(d, lp):
            out[(*keys[o], int(lp.get("k", 0)))] = (by_ord[o], lp)
    return out


def _complete(l: dict[str, Any], lp: dict[str, Any]) -> bool:
    """The pass fetched the whole epoch (to StopIteration, or as many batches as the loader has) and kept
    every index."""
    if lp.get("truncated"):
        return False
    return bool(lp.get("exhausted")) or (
        l.get("batches") is not None and int(lp.get("batches") or 0) >= int(l["batches"])
    )


def _layer(l: dict[str, Any]) -> str:
    """The DataLoader's sampling layers as a user would name them."""
    chain = [c for c in (l.get("chain") or []) if c != "BatchSampler"]
    return " over ".join(chain) if chain else str(l.get("sampler"))


def _fetched_shards(
    record: RunRecord, data: dict[int, RankData], ranks: list[int], skip_overlap: bool
) -> list[Finding]:
    per = {r: _fetched_passes(data[r]) for r in ranks}
    common = [k for k in per[ranks[0]] if all(k in per[r] for r in ranks[1:])]
    world = len(ranks)
    out: list[Finding] = []
    gaps_done = False
    for key in common[:FETCH_KEYS]:
        loaders = {r: per[r][key][0] for r in ranks}
        lps = {r: per[r][key][1] for r in ranks}
        if all(lp.get("index_kind") == "none" for lp in lps.values()):
            firsts = {r: lp.get("first_batch") for r, lp in lps.items()}
            if (
                not skip_overlap
                and None not in firsts.values()
                and "?" not in firsts.values()
                and len(set(firsts.values())) == 1
            ):
                out.append(_stream_overlap(record, ranks, key, loaders, lps))
                skip_overlap = True
            continue
        if any(lp.get("index_kind", "int") != "int" or lp.get("indices") is None for lp in lps.values()):
            continue
        idx = {r: lp["indices"] for r, lp in lps.items()}
        subsets = {r: l.get("subset") for r, l in loaders.items()}
        fps = {r: l.get("data_fp") for r, l in loaders.items()}
        mapped = False
        if all(subsets.values()):
            try:  # per-rank Subsets: compare the samples of the base data set
                idx = {r: [subsets[r][i] for i in v] for r, v in idx.items()}  # type: ignore[index]
                mapped = True
            except (IndexError, TypeError):
                continue
        elif any(l.get("subset_digest") for l in loaders.values()):
            continue
        elif all(f is not None for f in fps.values()) and len(set(fps.values())) > 1:
            continue  # each rank holds its own data (pre-sharded): the indices name different samples
        n = None if mapped else loaders[ranks[0]].get("dataset_len")
        seen: dict[int, int] = defaultdict(int)
        for v in idx.values():
            for i in v:
                seen[i] += 1
        dup = sum(c - 1 for c in seen.values() if c > 1)
        total = sum(len(v) for v in idx.values())
        maxb = max(int(lp.get("maxb") or 1) for lp in lps.values())
        allowance = 0 if mapped or not n else min(max(0, total - n), world * maxb)
        if dup > allowance and not skip_overlap:
            out.append(_fetched_overlap(record, data, ranks, key, loaders, lps, idx, dup, n, mapped))
            skip_overlap = True
            continue
        complete = all(_complete(loaders[r], lp) for r, lp in lps.items())
        skipping = any("SkipBatchSampler" in (l.get("chain") or []) for l in loaders.values())
        gaps = (n - len(seen)) if n else 0
        if (
            not gaps_done
            and not skip_overlap
            and not dup
            and complete
            and not skipping
            and n
            and gaps > max(world * maxb, n // 100)
        ):  # an overlap explains its own gaps
            gaps_done = True
            out.append(_fetched_gaps(record, data, ranks, key, loaders, lps, gaps, n))
    return out


def _fetched_overlap(
    record: RunRecord,
    data: dict[int, RankData],
    ranks: list[int],
    key: tuple,
    loaders: dict[int, dict],
    lps: dict[int, dict],
    idx: dict[int, list[int]],
    dup: int,
    n: int | None,
    mapped: bool,
) -> Finding:
    k = key[-1]
    first = loaders[ranks[0]]
    sets = {r: set(v) for r, v in idx.items()}
    complete = all(_complete(loaders[r], lp) for r, lp in lps.items())
    whole = (
        bool(n)
        and complete
        and all(len(s) >= (n or 0) - int(lps[r].get("maxb") or 1) * len(ranks) for r, s in sets.items())
    )
    made = {l.get("made_by") for l in loaders.values()} - {None}
    by = f" ({', '.join(sorted(str(m) for m in made))} built it)" if made else ""
    ev: dict[str, Any] = {
        "pass": k,
        "overlap_samples": dup,
        "dataset_len": n,
        "fetched": {r: len(v) for r, v in idx.items()},
        "layers": _layer(first),
        "made_by": sorted(made) or None,
    }
    if whole:
        culprits = tuple(ranks)
        shard = first.get("shard")
        what = (
            f"{(shard or {}).get('by', '')} {shard.get('layer')}".strip()
            if shard
            else f"DataLoader without DistributedSampler ({_layer(first)})"
        )
        msg = (
            f"{what}{by}: every rank iterated all {n} samples of the same data set in pass {k}, so each "
            f"sample is seen {len(ranks)}x per epoch"
        )
        hint = (
            "Use DistributedSampler(dataset) as the DataLoader's sampler (and call set_epoch each epoch), or "
            "give each rank its own shard of the data."
        )
        ev["overlap"] = 1.0
    else:
        pairs = [(a, b, len(sets[a] & sets[b])) for i, a in enumerate(ranks) for b in ranks[i + 1 :]]
        shared = [(a, b, m) for a, b, m in pairs if m]
        culprits = tuple(sorted({x for a, b, _m in shared for x in (a, b)})) or tuple(ranks)
        a, b, m = max(shared, key=lambda t: t[2]) if shared else (ranks[0], ranks[-1], 0)
        src = "their Subsets" if mapped else f"the DataLoader ({_layer(first)}){by}"
        msg = (
            f"the ranks' shards overlap: in pass {k} ranks {a} and {b} fetched {m} of the same samples from "
            f"{src} ({len(shared)} overlapping pair(s) among {ranks_phrase(culprits)})"
        )
        hint = (
            "Make the per-rank shards disjoint (DistributedSampler with the same data set and seed on every rank, "
            "or indices[rank::world_size])."
        )
        ev["pairs"] = len(shared)
    hint += _framework_hint(record, DATA_SHARD_OVERLAP, loaders)
    locs = tuple(l for r in ranks if (l := loc(r, loaders[r].get("site"), "DataLoader")))
    return Finding(DATA_SHARD_OVERLAP, "error", msg, hint, tuple(ranks), locs, ev, culprits=culprits)


def _stream_overlap(
    record: RunRecord, ranks: list[int], key: tuple, loaders: dict[int, dict], lps: dict[int, dict]
) -> Finding:
    """An IterableDataset has no indices to compare: every rank's first batch of the pass was the same."""
    k = key[-1]
    msg = (
        f"every rank read the same stream from its IterableDataset in pass {k} (the first batch is identical "
        f"on {ranks_phrase(ranks)}): the data is not sharded by rank, so each sample is trained on "
        f"{len(ranks)}x per epoch"
    )
    hint = (
        "An IterableDataset must shard itself: skip to this rank's part in __iter__ (e.g. "
        "`itertools.islice(stream, rank, None, world_size)`, and by worker with get_worker_info()), or use "
        "a map-style Dataset with DistributedSampler."
    )
    hint += _framework_hint(record, DATA_SHARD_OVERLAP, loaders)
    locs = tuple(l for r in ranks if (l := loc(r, loaders[r].get("site"), "DataLoader")))
    ev = {"pass": k, "first_batch": lps[ranks[0]].get("first_batch"), "iterable": True}
    return Finding(DATA_SHARD_OVERLAP, "error", msg, hint, tuple(ranks), locs, ev, culprits=tuple(ranks))


def _fetched_gaps(
    record: RunRecord,
    data: dict[int, RankData],
    ranks: list[int],
    key: tuple,
    loaders: dict[int, dict],
    lps: dict[int, dict],
    gaps: int,
    n: int,
) -> Finding:
    k = key[-1]
    first = loaders[ranks[0]]
    chain = first.get("chain") or []
    shard = first.get("shard") or {}
    if shard and "DistributedSampler" in chain:
        why = (
            f"{shard.get('by', 'the framework').capitalize()} shards the batches ({shard.get('layer')}) of a "
            f"DataLoader whose DistributedSampler already gave each rank its shard, so each rank trains on "
            f"1/{len(ranks)} of its shard"
        )
        hint = "Shard once: drop the DistributedSampler (use shuffle=True) and let the framework shard the batches."
    else:
        why = f"the ranks' shards ({_layer(first)}) do not cover the data set"
        hint = (
            "Give the ranks shards that together cover the data set: DistributedSampler(dataset) over the same "
            "data set on every rank, with nothing else sharding it again."
        )
    hint += _framework_hint(record, DATA_SHARD_GAPS, loaders)
    fetched = {r: int(lp.get("n") or 0) for r, lp in lps.items()}
    locs: list[Location] = []
    for r in ranks:
        sid = loaders[r].get("sampler_sid")
        init = next((e for e in data[r].inits.values() if sid is not None and e.get("sid") == sid), {})
        for site, role in ((loaders[r].get("site"), "DataLoader"), (init.get("site"), "sampler built")):
            if (l := loc(r, site, role)) and all((x.rank, x.file, x.line) != (l.rank, l.file, l.line) for x in locs):
                locs.append(l)
    return Finding(
        DATA_SHARD_GAPS,
        "error",
        f"pass {k}: the ranks together fetched {n - gaps} of the {n} samples; {gaps} are never trained "
        f"on in an epoch: {why}",
        hint,
        tuple(ranks),
        tuple(locs),
        {"pass": k, "gaps": gaps, "dataset_len": n, "fetched": fetched, "layers": _layer(first)},
        culprits=tuple(ranks),
    )
