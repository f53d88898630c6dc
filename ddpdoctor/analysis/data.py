"""Data mistakes that make DDP training silently wrong: set_epoch, sampler seeds, shards. Pure."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ddpdoctor.analysis.model import Config, Finding
from ddpdoctor.analysis.state import loc
from ddpdoctor.record.reader import RunRecord


def _events(record: RunRecord, kind: str) -> dict[int, list[dict[str, Any]]]:
    return {r: [e for e in rec.checks if e.get("kind") == kind] for r, rec in record.ranks.items()}


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    samplers = _events(record, "sampler")
    loaders = _events(record, "loader")
    out: list[Finding] = []
    out += _missing_set_epoch(samplers)
    out += _sampler_seeds(samplers)
    out += _shards(record, samplers, loaders)
    return out


def _missing_set_epoch(samplers: dict[int, list[dict]]) -> list[Finding]:
    hits: dict[int, tuple] = {}
    for r, evs in samplers.items():
        by_sampler: dict[int, list[dict]] = defaultdict(list)
        for e in evs:
            by_sampler[e.get("sid", 0)].append(e)
        for seq in by_sampler.values():
            for a, b in zip(seq, seq[1:]):
                if a.get("shuffle") and a.get("epoch") == b.get("epoch") and a.get("digest") == b.get("digest"):
                    hits.setdefault(r, (b, len(seq)))
                    break
    if not hits:
        return []
    ranks = tuple(sorted(hits))
    e, n = hits[ranks[0]]
    locs = tuple(l for r in ranks if (l := loc(r, hits[r][0].get("site"), "epoch loop")))
    return [Finding("data.missing-set-epoch", "error",
                    f"DistributedSampler iterated {n} times with epoch {e.get('epoch')} every time: every epoch sees "
                    f"the same order (set_epoch is never called)",
                    "Call sampler.set_epoch(epoch) at the start of every epoch, before iterating the DataLoader.",
                    ranks, locs, {"epochs_seen": n, "epoch_value": e.get("epoch")})]


def _sampler_seeds(samplers: dict[int, list[dict]]) -> list[Finding]:
    first = {r: evs[0] for r, evs in samplers.items() if evs}
    seeds = {r: e.get("seed") for r, e in first.items()}
    if len(set(seeds.values())) < 2:
        return []
    locs = tuple(l for r, e in first.items() if (l := loc(r, e.get("site"), f"seed {e.get('seed')}")))
    return [Finding("data.sampler-seed-mismatch", "error",
                    f"DistributedSampler seeds differ across ranks {seeds}: each rank shuffles differently, so shards "
                    "overlap and leave gaps",
                    "Pass the same seed to DistributedSampler on every rank (the default is 0); vary set_epoch, not "
                    "the seed.", tuple(sorted(seeds)), locs, {"seeds": seeds})]


def _shards(record: RunRecord, samplers: dict[int, list[dict]], loaders: dict[int, list[dict]]) -> list[Finding]:
    out: list[Finding] = []
    ranks = sorted(record.ranks)
    if len(ranks) < 2:
        return out
    # 1. no DistributedSampler: every rank iterates the whole data set (unless it is a per-rank Subset)
    plain = {r: [l for l in ls if not l.get("distributed") and not l.get("iterable")] for r, ls in loaders.items()}
    if all(plain.get(r) for r in ranks):
        firsts = {r: plain[r][0] for r in ranks}
        subsets = {r: l.get("subset_digest") for r, l in firsts.items()}
        if all(d is None for d in subsets.values()) or len(set(subsets.values())) == 1:
            locs = tuple(l for r, e in firsts.items() if (l := loc(r, e.get("site"), "DataLoader")))
            n = firsts[ranks[0]].get("dataset_len")
            out.append(Finding("data.shard-overlap", "error",
                               f"DataLoader without DistributedSampler ({firsts[ranks[0]].get('sampler')}): every rank "
                               f"iterates the whole data set of {n} samples, so each sample is seen {len(ranks)}x per "
                               "epoch", "Use DistributedSampler(dataset) as the DataLoader's sampler (and call "
                               "set_epoch each epoch).", tuple(ranks), locs, {"dataset_len": n, "overlap": 1.0}))
        else:
            sets = {r: set(firsts[r].get("subset") or []) for r in ranks}
            inter = set.intersection(*sets.values()) if sets else set()
            if inter:
                locs = tuple(l for r, e in firsts.items() if (l := loc(r, e.get("site"), "DataLoader")))
                out.append(Finding("data.shard-overlap", "error",
                                   f"hand-made shards overlap: {len(inter)} samples are in every rank's Subset",
                                   "Use DistributedSampler, or make the per-rank index ranges disjoint.",
                                   tuple(ranks), locs, {"overlap_samples": len(inter)}))
    # 2. DistributedSampler: per epoch, what the ranks actually drew
    by_epoch: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r, evs in samplers.items():
        count: dict[int, int] = defaultdict(int)
        for e in evs:
            k = count[e.get("sid", 0)]
            count[e.get("sid", 0)] += 1
            by_epoch[(k,)][r] = e  # the k-th iteration of a sampler on each rank is one epoch
    reported_overlap = any(f.id == "data.shard-overlap" for f in out)
    for (k,), evs in sorted(by_epoch.items()):
        if len(evs) < len(ranks) or any(e.get("indices") is None for e in evs.values()):
            continue
        sets = {r: e["indices"] for r, e in evs.items()}
        n = next(iter(evs.values())).get("dataset_len") or 0
        seen: dict[int, int] = defaultdict(int)
        for idx in sets.values():
            for i in idx:
                seen[i] += 1
        dup = sum(c - 1 for c in seen.values() if c > 1)
        total = sum(len(v) for v in sets.values())
        padding = max(0, total - n) if not next(iter(evs.values())).get("drop_last") else 0
        gaps = n - len(seen)
        if not reported_overlap and dup > padding:
            locs = tuple(l for r, e in evs.items() if (l := loc(r, e.get("site"), "epoch loop")))
            out.append(Finding("data.shard-overlap", "error",
                               f"epoch {k}: the ranks' shards overlap by {dup - padding} samples and miss {gaps} of {n}",
                               "Give every rank's DistributedSampler the same seed and num_replicas/rank from the "
                               "process group.", tuple(ranks), locs,
                               {"epoch": k, "overlap": dup - padding, "gaps": gaps, "dataset_len": n}))
            reported_overlap = True
        elif padding and k == 0:
            out.append(Finding("data.padding-duplicates", "note",
                               f"DistributedSampler pads {padding} duplicate sample(s) per epoch so that {n} samples "
                               f"divide over {len(ranks)} ranks (drop_last=False)",
                               "Fine for training; for exact evaluation metrics use drop_last=True or de-duplicate.",
                               tuple(ranks), (), {"padding": padding, "dataset_len": n}))
    lens = {r: [e.get("len") for e in rec.events if e.get("kind") == "dataloader"] for r, rec in record.ranks.items()}
    firsts = {r: v[0] for r, v in lens.items() if v}
    if len(firsts) == len(ranks) and len(set(firsts.values())) > 1:
        out.append(Finding("data.uneven-batches", "warning",
                           f"ranks have different numbers of batches per epoch {firsts}: the rank with more batches "
                           "will wait in its extra DDP step (see hang.uneven-batches)",
                           "Use DistributedSampler with drop_last=True, or `with model.join():`.",
                           tuple(ranks), (), {"batches": firsts}))
    return out
