"""Data mistakes that make DDP training silently wrong: set_epoch, sampler seeds, shards. Pure.

The rank side records every iteration of a DistributedSampler as a *pass* (its epoch, seed, indices,
how many indices it handed out, whether the optimizer stepped while it was open) and marks DataLoaders
that trained. A training epoch is a pass that trained; a peek (``next(iter(loader))``, a pass that
handed out a few batches and was abandoned, or one followed by ``set_epoch`` with a new value) and an
evaluation loop are not epochs.

Shards are judged from what each rank's DataLoader iterators really fetched (``loader_pass`` records:
the indices its index sampler handed out, whoever built the loader), so loaders that a framework made or
wrapped (Accelerate's ``BatchSamplerShard``, Lightning's DistributedSampler replacement) are judged like
hand-made ones. Records without loader passes fall back to how the loaders were built.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ddpdoctor.analysis.check.records import (
    Pass,
    RankData,
    _epochs,
    _framework_hint,
    _grouped,
    _minority,
    _rank_data,
    _short,
    _trained_loaders,
)
from ddpdoctor.analysis.check.shards import _shards
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, ranks_phrase
from ddpdoctor.analysis.ids import DATA_MISSING_SET_EPOCH, DATA_SAMPLER_SEED_MISMATCH, DATA_UNEVEN_BATCHES
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """The data findings (set_epoch, sampler seeds, shards, uneven batches) from the check records."""
    data = {r: _rank_data(rec.checks) for r, rec in record.ranks.items()}
    out: list[Finding] = []
    out += _missing_set_epoch(data, record)
    out += _sampler_seeds(data)
    out += _shards(record, data)
    out += _uneven(record, data)
    return out


def _repeat(epochs: list[Pass]) -> tuple[Pass, Pass, int] | None:
    """The first two consecutive training epochs with the same epoch value and order."""
    for a, b in zip(epochs, epochs[1:]):
        if a.e.get("shuffle") and a.epoch == b.epoch and a.e.get("digest") == b.e.get("digest"):
            same = sum(1 for p in epochs if p.epoch == a.epoch and p.e.get("digest") == a.e.get("digest"))
            return a, b, same
    return None


def _sequential(seqs: list[list[Pass]]) -> bool:
    """Samplers used one after another (each one's passes all before the next one's)."""
    spans = sorted((s[0].e.get("t", 0), s[-1].e.get("t", 0)) for s in seqs if s)
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def _missing_set_epoch(data: dict[int, RankData], record: RunRecord | None = None) -> list[Finding]:
    hits: dict[int, dict[str, Any]] = {}
    for r, d in data.items():
        for o, seq in sorted(d.passes.items()):
            epochs = _epochs(d, seq)
            rep = _repeat(epochs)
            if rep:
                a, b, same = rep
                hits[r] = {
                    "a": a,
                    "b": b,
                    "same": same,
                    "epochs": len(epochs),
                    "peeks": len(seq) - len(epochs),
                    "init": d.inits.get(o),
                    "set_epoch": d.set_epochs.get(o, []),
                    "rebuilt": False,
                }
                break
        if r in hits:
            continue
        # a new shuffling sampler built at the same line for every epoch, its epoch never set
        by_site: dict[tuple, list[int]] = defaultdict(list)
        for o, init in d.inits.items():
            if init.get("site") and init.get("shuffle"):
                by_site[tuple(init["site"][:2])].append(o)
        for _site, ords in by_site.items():
            seqs = [d.passes.get(o, []) for o in sorted(ords)]
            if len(ords) < 2 or any(d.set_epochs.get(o) for o in ords) or not _sequential(seqs):
                continue
            merged = [p for s in seqs for p in _epochs(d, s)]
            rep = _repeat(merged)
            if rep:
                a, b, same = rep
                hits[r] = {
                    "a": a,
                    "b": b,
                    "same": same,
                    "epochs": len(merged),
                    "peeks": 0,
                    "init": d.inits.get(b.ordinal),
                    "set_epoch": [],
                    "rebuilt": True,
                }
                break
    if not hits:
        return []
    culprits = tuple(sorted(hits))
    h = hits[culprits[0]]
    a, b = h["a"], h["b"]
    init = h["init"] or {}
    where = _short(init.get("site"))
    if h["rebuilt"]:
        why = "a new DistributedSampler is built for every epoch and its epoch is never set"
        hint = (
            "Build the DistributedSampler (and DataLoader) once, before the epoch loop, and call "
            "sampler.set_epoch(epoch) at the start of every epoch."
        )
    elif not h["set_epoch"]:
        why = "set_epoch is never called"
        hint = (
            "Call sampler.set_epoch(epoch) at the start of every epoch, before iterating the DataLoader "
            "(a peek such as next(iter(loader)) before it is fine)."
        )
    else:
        values = sorted({s.get("epoch") for s in h["set_epoch"]}, key=repr)
        why = (
            f"set_epoch is called, always with {values[0]}"
            if len(values) == 1
            else "set_epoch is not called before every epoch"
        )
        hint = (
            "Pass the current epoch number to sampler.set_epoch(epoch) at the start of every epoch, before "
            "iterating the DataLoader."
        )
    msg = (
        f"DistributedSampler{f' built at {where}' if where else ''} gives {h['same']} training epochs the same "
        f"order: its epoch is {a.epoch} each time ({why}); on {ranks_phrase(culprits)}"
    )
    locs: list[Location] = []
    for r in culprits:
        hr = hits[r]
        for site, role in (((hr["init"] or {}).get("site"), "sampler built"), (hr["b"].e.get("site"), "epoch loop")):
            if (l := loc(r, site, role)) and l not in locs:
                locs.append(l)
    if record is not None:
        hint += _framework_hint(record, DATA_MISSING_SET_EPOCH, {})
    return [
        Finding(
            DATA_MISSING_SET_EPOCH,
            "error",
            msg,
            hint,
            tuple(sorted(data)),
            tuple(locs),
            {
                "epoch_value": a.epoch,
                "training_epochs": h["epochs"],
                "same_order": h["same"],
                "epochs_seen": h["same"],
                "peeks": h["peeks"],
                "set_epoch_calls": len(h["set_epoch"]),
                "rebuilt_per_epoch": h["rebuilt"],
            },
            culprits=culprits,
        )
    ]


def _first_passes(data: dict[int, RankData]) -> dict[int, Pass]:
    out = {}
    for r, d in data.items():
        if d.passes:
            o = min(d.passes)
            if d.passes[o]:
                out[r] = d.passes[o][0]
    return out


def _sampler_seeds(data: dict[int, RankData]) -> list[Finding]:
    first = _first_passes(data)
    seeds = {r: p.e.get("seed") for r, p in first.items()}
    if len(set(seeds.values())) < 2:
        return []
    culprits = _minority(seeds)
    locs = tuple(
        l
        for r, p in sorted(first.items())
        if (l := loc(r, (data[r].inits.get(p.ordinal) or {}).get("site") or p.e.get("site"), f"seed {p.e.get('seed')}"))
    )
    groups: dict[Any, list[int]] = defaultdict(list)
    for r, s in seeds.items():
        groups[s].append(r)
    shown = "; ".join(f"seed {s} on {ranks_phrase(rs)}" for s, rs in sorted(groups.items(), key=lambda kv: min(kv[1])))
    return [
        Finding(
            DATA_SAMPLER_SEED_MISMATCH,
            "error",
            f"DistributedSampler seeds differ across ranks ({shown}): each rank shuffles differently, so "
            "shards overlap and leave gaps",
            "Pass the same seed to DistributedSampler on every rank (the default is 0); vary set_epoch, not the seed.",
            tuple(sorted(seeds)),
            locs,
            {"seeds": seeds},
            culprits=culprits,
        )
    ]


def _uneven(record: RunRecord, data: dict[int, RankData]) -> list[Finding]:
    ranks = sorted(record.ranks)
    if len(ranks) < 2:
        return []
    if any(rec.event(schema.K_JOIN) for rec in record.ranks.values()):
        return []  # model.join() / Join([...]): uneven inputs handled by design
    loaders = {r: _trained_loaders(data[r]) for r in ranks}
    if all(loaders[r] and loaders[r][0].get("batches") is not None for r in ranks):
        firsts = {r: loaders[r][0] for r in ranks}
        batches: dict[int, Any] = {r: l.get("batches") for r, l in firsts.items()}
    else:  # older records: the first DataLoader each rank iterated
        dl_lens = {
            r: [e.get("len") for e in rec.events if e.get("kind") == schema.K_DATALOADER]
            for r, rec in record.ranks.items()
        }
        batches = {r: v[0] for r, v in dl_lens.items() if v}
        firsts = {}
        if len(batches) < len(ranks):
            return []
    if len(set(batches.values())) < 2:
        return []
    low = min(batches.values())
    culprits = tuple(sorted(r for r, b in batches.items() if b != low))
    ev: dict[str, Any] = {"batches": batches}
    dist_all = bool(firsts) and all(l.get("distributed") for l in firsts.values())
    lens = {r: l.get("dataset_len") for r, l in firsts.items()}
    bss = {r: l.get("batch_size") for r, l in firsts.items()}
    join = "or run the training loop under `with model.join():` so ranks that run out keep joining the all-reduces"
    if dist_all and len(set(lens.values())) > 1:
        cause = f"the ranks built data sets of different lengths ({_grouped(lens)}) for their DistributedSamplers"
        hint = f"Build the same data set on every rank (DistributedSampler then gives each the same share), {join}."
        ev["dataset_lens"] = lens
    elif firsts and len(set(bss.values())) > 1:
        cause = f"the batch sizes differ ({_grouped(bss)})"
        hint = f"Use the same batch_size on every rank, {join}."
        ev["batch_sizes"] = bss
    elif dist_all:
        cause = "the DistributedSamplers give the ranks different numbers of samples"
        hint = f"Pass drop_last=True to the DistributedSampler and the DataLoader, {join}."
    else:
        cause = "the data is split by hand into shards of different sizes"
        hint = (
            f"Give every rank the same number of samples (DistributedSampler(dataset, drop_last=True), or trim "
            f"each shard to the shortest), {join}."
        )
    locs = tuple(l for r in culprits if r in firsts and (l := loc(r, firsts[r].get("site"), "DataLoader")))
    return [
        Finding(
            DATA_UNEVEN_BATCHES,
            "warning",
            f"ranks have different numbers of batches per epoch ({_grouped(batches)}): {cause}; "
            f"{ranks_phrase(culprits)} run(s) extra DDP steps whose all-reduce the others never join "
            "(see hang.uneven-batches)",
            hint,
            tuple(ranks),
            locs,
            ev,
            culprits=culprits,
        )
    ]
