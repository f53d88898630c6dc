"""data.shard-overlap / data.shard-gap: do the ranks' shards of the data set overlap or leave samples out? Pure."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ddpdoctor.analysis.check.fetched import _fetched_shards
from ddpdoctor.analysis.check.records import Pass, RankData, _grouped, _minority, _trained_loaders
from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.analysis.ids import DATA_PADDING_DUPLICATES, DATA_SHARD_OVERLAP
from ddpdoctor.analysis.state import loc
from ddpdoctor.record.reader import RunRecord


def _shards(record: RunRecord, data: dict[int, RankData]) -> list[Finding]:
    out: list[Finding] = []
    ranks = sorted(record.ranks)
    if len(ranks) < 2:
        return out
    # 1. no DistributedSampler: the loader that trains iterates the whole data set on every rank, unless
    #    the ranks hold different data (per-rank Subsets, or pre-sharded data sets)
    fetched = any(data[r].lpasses for r in ranks)  # newer records: judge what the iterators fetched (below)
    train = {r: _trained_loaders(data[r]) for r in ranks}
    plain = {
        r: [l for l in train[r] if not l.get("distributed") and not l.get("iterable") and not l.get("shard")]
        for r in ranks
    }
    if (
        not fetched
        and all(plain.get(r) for r in ranks)
        and not any(any(l.get("distributed") for l in train[r]) for r in ranks)
    ):
        firsts = {r: plain[r][0] for r in ranks}
        subsets = {r: l.get("subset_digest") for r, l in firsts.items()}
        fps = {r: l.get("data_fp") for r, l in firsts.items()}
        locs = tuple(l for r, e in firsts.items() if (l := loc(r, e.get("site"), "DataLoader")))
        if all(d is not None for d in subsets.values()) and len(set(subsets.values())) > 1:
            sets = {r: set(firsts[r].get("subset") or []) for r in ranks}
            pairs = [(a, b, len(sets[a] & sets[b])) for i, a in enumerate(ranks) for b in ranks[i + 1 :]]
            shared = [(a, b, n) for a, b, n in pairs if n]
            if shared:
                culprits = tuple(sorted({x for a, b, _n in shared for x in (a, b)}))
                a, b, n = max(shared, key=lambda t: t[2])
                out.append(
                    Finding(
                        DATA_SHARD_OVERLAP,
                        "error",
                        f"hand-made shards overlap: ranks {a} and {b} share {n} samples of their Subsets "
                        f"({len(shared)} overlapping pair(s) among {ranks_phrase(culprits)})",
                        "Make the per-rank index ranges disjoint (e.g. indices[rank::world_size]), or use "
                        "DistributedSampler.",
                        tuple(ranks),
                        locs,
                        {"overlap_samples": n, "pairs": len(shared)},
                        culprits=culprits,
                    )
                )
        elif (
            all(f is not None for f in fps.values())
            and len(set(fps.values())) > 1
            and all(d is None for d in subsets.values())
        ):
            pass  # each rank holds its own data: pre-sharded, nothing to compare
        else:
            size = firsts[ranks[0]].get("dataset_len")
            out.append(
                Finding(
                    DATA_SHARD_OVERLAP,
                    "error",
                    f"DataLoader without DistributedSampler ({firsts[ranks[0]].get('sampler')}): every rank "
                    f"iterates the same data set of {size} samples, so each sample is seen {len(ranks)}x per "
                    "epoch",
                    "Use DistributedSampler(dataset) as the DataLoader's sampler (and call "
                    "set_epoch each epoch), or give each rank its own shard of the data.",
                    tuple(ranks),
                    locs,
                    {"dataset_len": size, "overlap": 1.0},
                    culprits=tuple(ranks),
                )
            )
    # 2. DistributedSampler: per pass, what the ranks actually drew
    by_pass: dict[tuple[int, int], dict[int, Pass]] = defaultdict(dict)
    for r in ranks:
        for o, seq in data[r].passes.items():
            for p in seq:
                by_pass[(o, p.k)][r] = p
    reported_overlap = any(f.id == DATA_SHARD_OVERLAP for f in out)
    padded = False
    for (o, k), ps in sorted(by_pass.items()):
        if len(ps) < len(ranks) or any(p.e.get("indices") is None for p in ps.values()):
            continue
        first = ps[ranks[0]].e
        n = first.get("dataset_len") or 0
        seen: dict[int, int] = defaultdict(int)
        for p in ps.values():
            for i in p.e["indices"]:
                seen[i] += 1
        dup = sum(c - 1 for c in seen.values() if c > 1)
        total = sum(len(p.e["indices"]) for p in ps.values())
        padding = max(0, total - n) if not first.get("drop_last") else 0
        gaps = max(0, n - len(seen))
        if not reported_overlap and dup > padding:
            out.append(_overlap_finding(record, data, ps, k, dup - padding, gaps, n))
            reported_overlap = True
        elif padding and not padded:
            padded = True
            out.append(
                Finding(
                    DATA_PADDING_DUPLICATES,
                    "note",
                    f"DistributedSampler pads {padding} duplicate sample(s) per epoch so that {n} samples "
                    f"divide over {len(ranks)} ranks (drop_last=False)",
                    "Fine for training; for exact evaluation metrics use drop_last=True or de-duplicate.",
                    tuple(ranks),
                    (),
                    {"padding": padding, "dataset_len": n},
                    culprits=tuple(ranks),
                )
            )
    # 3. what the DataLoader iterators fetched, pass by pass, whoever built or wrapped the loader
    if fetched:
        out += _fetched_shards(record, data, ranks, skip_overlap=any(f.id == DATA_SHARD_OVERLAP for f in out))
    return out


def _overlap_finding(
    record: RunRecord, data: dict[int, RankData], ps: dict[int, Pass], k: int, overlap: int, gaps: int, n: int
) -> Finding:
    ranks = sorted(ps)
    world = record.world_size or len(record.ranks)
    lens = {r: p.e.get("dataset_len") for r, p in ps.items()}
    seeds = {r: p.e.get("seed") for r, p in ps.items()}
    reps = {r: p.e.get("num_replicas") for r, p in ps.items()}
    srank = {r: p.e.get("sampler_rank") for r, p in ps.items()}
    epochs = {r: p.epoch for r, p in ps.items()}
    ev: dict[str, Any] = {"pass": k, "overlap": overlap, "gaps": gaps, "dataset_len": n}
    if len(set(lens.values())) > 1:
        culprits = _minority(lens)
        why = f"the ranks built data sets of different lengths ({_grouped(lens)}), so their shards do not split one data set"
        hint = (
            "Build the same data set (same files, filtering and order) on every rank before DistributedSampler; "
            "to give each rank its own files instead, drop DistributedSampler and load only that rank's shard."
        )
        ev["dataset_lens"] = lens
    elif len(set(seeds.values())) > 1:
        culprits = _minority(seeds)
        why = f"the samplers' seeds differ ({_grouped(seeds)})"
        hint = "Give every rank's DistributedSampler the same seed (the default 0); vary set_epoch, not the seed."
        ev["seeds"] = seeds
    elif (
        any(v != world for v in reps.values())
        or len(set(srank.values())) < len(ranks)
        or any(srank[r] != r for r in ranks if isinstance(srank[r], int))
    ):
        bad = {r for r in ranks if reps[r] != world}
        dup = Counter(srank.values())
        bad |= {r for r in ranks if dup[srank[r]] > 1 or srank[r] != r}
        culprits = tuple(sorted(bad)) or tuple(ranks)
        why = (
            f"num_replicas/rank do not match the process group (world size {world}; num_replicas "
            f"{_grouped(reps)}; rank {_grouped(srank)})"
        )
        hint = (
            "Let DistributedSampler take num_replicas and rank from the process group (pass neither), or pass "
            "dist.get_world_size() and dist.get_rank()."
        )
        ev.update(num_replicas=reps, sampler_rank=srank)
    elif len(set(map(repr, epochs.values()))) > 1:
        culprits = _minority(epochs)
        why = f"set_epoch gave the ranks different epochs ({_grouped(epochs)})"
        hint = "Call sampler.set_epoch(epoch) with the same epoch on every rank (not under `if rank == 0:`)."
        ev["epochs"] = epochs
    else:
        culprits = tuple(ranks)
        why = "the ranks' samplers disagree"
        hint = "Build every rank's DistributedSampler from the same data set with the same seed."
    locs = tuple(
        l
        for r in ranks
        if (l := loc(r, (data[r].inits.get(ps[r].ordinal) or {}).get("site") or ps[r].e.get("site"), "sampler built"))
    )
    return Finding(
        DATA_SHARD_OVERLAP,
        "error",
        f"pass {k} of the DistributedSampler: the ranks' shards overlap by {overlap} samples and miss {gaps} "
        f"of {n}: {why}",
        hint,
        tuple(ranks),
        locs,
        ev,
        culprits=culprits,
    )
