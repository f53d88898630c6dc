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

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.model import Config, Finding, Location, ranks_phrase
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

PEEK_FALLBACK = 0.1   # without the loader's batch size, a pass that used at most this share is a peek


@dataclass
class Pass:
    ordinal: int
    k: int
    e: dict[str, Any]
    end: dict[str, Any] | None = None
    by: set[str] = field(default_factory=set)

    @property
    def epoch(self) -> Any:
        return self.e.get("epoch")


@dataclass
class RankData:
    passes: dict[int, list[Pass]]                 # sampler ordinal -> passes in order
    inits: dict[int, dict[str, Any]]              # sampler ordinal -> sampler_init event
    set_epochs: dict[int, list[dict[str, Any]]]   # sampler ordinal -> set_epoch events
    loaders: list[dict[str, Any]]                 # loader events in order
    trained_loaders: dict[int, set[str]]          # loader ordinal -> {"step", "fwd"}
    has_optimizer: bool
    has_marks: bool                               # the rank recorded training marks (newer records)
    lpasses: list[dict[str, Any]] = field(default_factory=list)   # loader_pass events (what was fetched)


def _rank_data(checks: list[dict[str, Any]]) -> RankData:
    passes: dict[int, list[Pass]] = defaultdict(list)
    by_key: dict[tuple[int, int], Pass] = {}
    inits: dict[int, dict] = {}
    set_epochs: dict[int, list[dict]] = defaultdict(list)
    loaders: list[dict] = []
    trained_loaders: dict[int, set[str]] = defaultdict(set)
    sid_ordinal: dict[Any, int] = {}
    has_opt = has_marks = False
    lpasses: list[dict] = []
    for e in checks:
        kind = e.get("kind")
        if kind == "loader_pass":
            lpasses.append(e)
            continue
        if kind == "sampler_init":
            inits[int(e.get("ordinal", len(inits)))] = e
        elif kind == "sampler":
            o = e.get("ordinal")
            if o is None:   # records without ordinals: one sampler per id
                o = sid_ordinal.setdefault(e.get("sid", 0), len(sid_ordinal))
            o = int(o)
            k = int(e.get("k", len(passes[o])))
            p = Pass(o, k, e)
            passes[o].append(p)
            by_key[(o, k)] = p
        elif kind == "sampler_end":
            pe = by_key.get((int(e.get("ordinal", -1)), int(e.get("k", -1))))
            if pe is not None:
                pe.end = e
                has_marks = True
                if e.get("steps"):
                    pe.by.add("step")
                if e.get("fwds"):
                    pe.by.add("fwd")
        elif kind == "sampler_train":
            has_marks = True
            pt = by_key.get((int(e.get("ordinal", -1)), int(e.get("k", -1))))
            if pt is not None:
                pt.by.add(str(e.get("by")))
        elif kind == "set_epoch":
            set_epochs[int(e.get("ordinal", -1))].append(e)
        elif kind == "loader":
            loaders.append(e)
        elif kind == "loader_train":
            has_marks = True
            trained_loaders[int(e.get("ordinal", -1))].add(str(e.get("by")))
        elif kind == "optstep" or (kind == "accum_summary" and e.get("opt_steps")):
            has_opt = True
    return RankData(passes, inits, set_epochs, loaders, trained_loaders, has_opt, has_marks, lpasses)


def _trained(d: RankData, by: set[str]) -> bool:
    if not d.has_marks:
        return True   # older records: every pass counts
    return ("step" in by) if d.has_optimizer else ("fwd" in by or "step" in by)


def _peek_max(d: RankData, p: Pass) -> int:
    sid = p.e.get("sid")
    ld = next((l for l in reversed(d.loaders) if sid is not None and l.get("sampler_sid") == sid), None)
    n = int(p.e.get("n") or 0)
    if ld and ld.get("batch_size"):
        return int(ld["batch_size"]) * (1 + int(ld.get("prefetch") or 0))
    return max(1, int(n * PEEK_FALLBACK))


def _is_peek(d: RankData, p: Pass, nxt: Pass | None) -> bool:
    """Handed out a few batches and was abandoned, or was followed by set_epoch with a new value."""
    end = p.end or {}
    consumed = end.get("consumed")
    if consumed is not None and not end.get("exhausted") and consumed <= _peek_max(d, p):
        return True
    return nxt is not None and nxt.epoch != p.epoch


def _epochs(d: RankData, seq: list[Pass]) -> list[Pass]:
    """The passes of one sampler (or one construction site) that were training epochs."""
    return [p for i, p in enumerate(seq)
            if _trained(d, p.by) and not _is_peek(d, p, seq[i + 1] if i + 1 < len(seq) else None)]


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    data = {r: _rank_data(rec.checks) for r, rec in record.ranks.items()}
    out: list[Finding] = []
    out += _missing_set_epoch(data, record)
    out += _sampler_seeds(data)
    out += _shards(record, data)
    out += _uneven(record, data)
    return out


# -- set_epoch ------------------------------------------------------------------------------------------

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
                hits[r] = {"a": a, "b": b, "same": same, "epochs": len(epochs), "peeks": len(seq) - len(epochs),
                           "init": d.inits.get(o), "set_epoch": d.set_epochs.get(o, []), "rebuilt": False}
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
                hits[r] = {"a": a, "b": b, "same": same, "epochs": len(merged), "peeks": 0,
                           "init": d.inits.get(b.ordinal), "set_epoch": [], "rebuilt": True}
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
        hint = ("Build the DistributedSampler (and DataLoader) once, before the epoch loop, and call "
                "sampler.set_epoch(epoch) at the start of every epoch.")
    elif not h["set_epoch"]:
        why = "set_epoch is never called"
        hint = ("Call sampler.set_epoch(epoch) at the start of every epoch, before iterating the DataLoader "
                "(a peek such as next(iter(loader)) before it is fine).")
    else:
        values = sorted({s.get("epoch") for s in h["set_epoch"]}, key=repr)
        why = (f"set_epoch is called, always with {values[0]}" if len(values) == 1 else
               "set_epoch is not called before every epoch")
        hint = ("Pass the current epoch number to sampler.set_epoch(epoch) at the start of every epoch, before "
                "iterating the DataLoader.")
    msg = (f"DistributedSampler{f' built at {where}' if where else ''} gives {h['same']} training epochs the same "
           f"order: its epoch is {a.epoch} each time ({why}); on {ranks_phrase(culprits)}")
    locs: list[Location] = []
    for r in culprits:
        hr = hits[r]
        for site, role in (((hr["init"] or {}).get("site"), "sampler built"), (hr["b"].e.get("site"), "epoch loop")):
            if (l := loc(r, site, role)) and l not in locs:
                locs.append(l)
    if record is not None:
        hint += _framework_hint(record, "data.missing-set-epoch", {})
    return [Finding("data.missing-set-epoch", "error", msg, hint, tuple(sorted(data)), tuple(locs),
                    {"epoch_value": a.epoch, "training_epochs": h["epochs"], "same_order": h["same"],
                     "epochs_seen": h["same"], "peeks": h["peeks"], "set_epoch_calls": len(h["set_epoch"]),
                     "rebuilt_per_epoch": h["rebuilt"]},
                    culprits=culprits)]


def _short(site: Any) -> str:
    if isinstance(site, (list, tuple)) and len(site) >= 2:
        return f"{str(site[0]).rsplit('/', 1)[-1]}:{site[1]}"
    return ""


def _minority(values: dict[int, Any]) -> tuple[int, ...]:
    """The ranks whose value differs from the most common one (ties: from rank min's)."""
    counts = Counter(repr(v) for v in values.values())
    top = max(counts.values())
    first = min(values)
    common = repr(values[first]) if counts[repr(values[first])] == top else counts.most_common(1)[0][0]
    return tuple(sorted(r for r, v in values.items() if repr(v) != common))


# -- sampler seeds ----------------------------------------------------------------------------------------

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
    locs = tuple(l for r, p in sorted(first.items())
                 if (l := loc(r, (data[r].inits.get(p.ordinal) or {}).get("site") or p.e.get("site"),
                              f"seed {p.e.get('seed')}")))
    groups: dict[Any, list[int]] = defaultdict(list)
    for r, s in seeds.items():
        groups[s].append(r)
    shown = "; ".join(f"seed {s} on {ranks_phrase(rs)}" for s, rs in sorted(groups.items(), key=lambda kv: min(kv[1])))
    return [Finding("data.sampler-seed-mismatch", "error",
                    f"DistributedSampler seeds differ across ranks ({shown}): each rank shuffles differently, so "
                    "shards overlap and leave gaps",
                    "Pass the same seed to DistributedSampler on every rank (the default is 0); vary set_epoch, not "
                    "the seed.", tuple(sorted(seeds)), locs, {"seeds": seeds}, culprits=culprits)]


# -- shards -------------------------------------------------------------------------------------------------

def _trained_loaders(d: RankData) -> list[dict[str, Any]]:
    if not d.has_marks:
        return d.loaders
    want = "step" if d.has_optimizer else None
    return [l for l in d.loaders if (by := d.trained_loaders.get(int(l.get("ordinal", -1)), set()))
            and (want is None or want in by)]


def _shards(record: RunRecord, data: dict[int, RankData]) -> list[Finding]:
    out: list[Finding] = []
    ranks = sorted(record.ranks)
    if len(ranks) < 2:
        return out
    # 1. no DistributedSampler: the loader that trains iterates the whole data set on every rank, unless
    #    the ranks hold different data (per-rank Subsets, or pre-sharded data sets)
    fetched = any(data[r].lpasses for r in ranks)   # newer records: judge what the iterators fetched (below)
    train = {r: _trained_loaders(data[r]) for r in ranks}
    plain = {r: [l for l in train[r] if not l.get("distributed") and not l.get("iterable") and not l.get("shard")]
             for r in ranks}
    if not fetched and all(plain.get(r) for r in ranks) and \
            not any(any(l.get("distributed") for l in train[r]) for r in ranks):
        firsts = {r: plain[r][0] for r in ranks}
        subsets = {r: l.get("subset_digest") for r, l in firsts.items()}
        fps = {r: l.get("data_fp") for r, l in firsts.items()}
        locs = tuple(l for r, e in firsts.items() if (l := loc(r, e.get("site"), "DataLoader")))
        if all(d is not None for d in subsets.values()) and len(set(subsets.values())) > 1:
            sets = {r: set(firsts[r].get("subset") or []) for r in ranks}
            pairs = [(a, b, len(sets[a] & sets[b])) for i, a in enumerate(ranks) for b in ranks[i + 1:]]
            shared = [(a, b, n) for a, b, n in pairs if n]
            if shared:
                culprits = tuple(sorted({x for a, b, _n in shared for x in (a, b)}))
                a, b, n = max(shared, key=lambda t: t[2])
                out.append(Finding("data.shard-overlap", "error",
                                   f"hand-made shards overlap: ranks {a} and {b} share {n} samples of their Subsets "
                                   f"({len(shared)} overlapping pair(s) among {ranks_phrase(culprits)})",
                                   "Make the per-rank index ranges disjoint (e.g. indices[rank::world_size]), or use "
                                   "DistributedSampler.", tuple(ranks), locs,
                                   {"overlap_samples": n, "pairs": len(shared)}, culprits=culprits))
        elif all(f is not None for f in fps.values()) and len(set(fps.values())) > 1 and \
                all(d is None for d in subsets.values()):
            pass   # each rank holds its own data: pre-sharded, nothing to compare
        else:
            size = firsts[ranks[0]].get("dataset_len")
            out.append(Finding("data.shard-overlap", "error",
                               f"DataLoader without DistributedSampler ({firsts[ranks[0]].get('sampler')}): every rank "
                               f"iterates the same data set of {size} samples, so each sample is seen {len(ranks)}x per "
                               "epoch", "Use DistributedSampler(dataset) as the DataLoader's sampler (and call "
                               "set_epoch each epoch), or give each rank its own shard of the data.", tuple(ranks),
                               locs, {"dataset_len": size, "overlap": 1.0}, culprits=tuple(ranks)))
    # 2. DistributedSampler: per pass, what the ranks actually drew
    by_pass: dict[tuple[int, int], dict[int, Pass]] = defaultdict(dict)
    for r in ranks:
        for o, seq in data[r].passes.items():
            for p in seq:
                by_pass[(o, p.k)][r] = p
    reported_overlap = any(f.id == "data.shard-overlap" for f in out)
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
            out.append(Finding("data.padding-duplicates", "note",
                               f"DistributedSampler pads {padding} duplicate sample(s) per epoch so that {n} samples "
                               f"divide over {len(ranks)} ranks (drop_last=False)",
                               "Fine for training; for exact evaluation metrics use drop_last=True or de-duplicate.",
                               tuple(ranks), (), {"padding": padding, "dataset_len": n}, culprits=tuple(ranks)))
    # 3. what the DataLoader iterators fetched, pass by pass, whoever built or wrapped the loader
    if fetched:
        out += _fetched_shards(record, data, ranks, skip_overlap=any(f.id == "data.shard-overlap" for f in out))
    return out


# -- shards, from what the iterators fetched ------------------------------------------------------------------

FETCH_KEYS = 16   # matched training passes compared per run (the rank side keeps indices for 8 passes a loader)


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
    return bool(lp.get("exhausted")) or (l.get("batches") is not None and int(lp.get("batches") or 0) >= int(l["batches"]))


def _layer(l: dict[str, Any]) -> str:
    """The DataLoader's sampling layers as a user would name them."""
    chain = [c for c in (l.get("chain") or []) if c != "BatchSampler"]
    return " over ".join(chain) if chain else str(l.get("sampler"))


def _fetched_shards(record: RunRecord, data: dict[int, RankData], ranks: list[int],
                    skip_overlap: bool) -> list[Finding]:
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
            if not skip_overlap and None not in firsts.values() and "?" not in firsts.values() and \
                    len(set(firsts.values())) == 1:
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
            try:   # per-rank Subsets: compare the samples of the base data set
                idx = {r: [subsets[r][i] for i in v] for r, v in idx.items()}  # type: ignore[index]
                mapped = True
            except (IndexError, TypeError):
                continue
        elif any(l.get("subset_digest") for l in loaders.values()):
            continue
        elif all(f is not None for f in fps.values()) and len(set(fps.values())) > 1:
            continue   # each rank holds its own data (pre-sharded): the indices name different samples
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
        if not gaps_done and not skip_overlap and not dup and complete and not skipping and n and \
                gaps > max(world * maxb, n // 100):   # an overlap explains its own gaps
            gaps_done = True
            out.append(_fetched_gaps(record, data, ranks, key, loaders, lps, gaps, n))
    return out


def _framework_hint(record: RunRecord, fid: str, loaders: dict[int, dict]) -> str:
    from ddpdoctor.analysis.hang import frameworks

    fws = set(frameworks(record)) | {l.get("made_by") for l in loaders.values() if l.get("made_by")} | \
        {(l.get("shard") or {}).get("by") for l in loaders.values() if l.get("shard")}
    return "".join(DATA_FRAMEWORK_HINTS.get((fid, fw), "") for fw in ("lightning", "accelerate") if fw in fws)


DATA_FRAMEWORK_HINTS = {
    ("data.shard-overlap", "lightning"): (
        " Lightning: leave Trainer(use_distributed_sampler=True) (the default), which replaces the sampler of the "
        "loaders you return with a DistributedSampler; with use_distributed_sampler=False, shard the data yourself."),
    ("data.shard-overlap", "accelerate"): (
        " Accelerate: pass the DataLoader to accelerator.prepare(...) and iterate the loader it returns (it shards "
        "the batches per process); do not iterate the original loader."),
    ("data.shard-gaps", "accelerate"): (
        " Accelerate: give accelerator.prepare(...) a DataLoader with a plain sampler (shuffle=True, no "
        "DistributedSampler): it shards the batches itself."),
    ("data.shard-gaps", "lightning"): (
        " Lightning: return a plain DataLoader and let Lightning add the DistributedSampler "
        "(use_distributed_sampler=True)."),
    ("data.missing-set-epoch", "lightning"): (
        " Lightning calls set_epoch on the samplers of the loaders it runs; a loop you run yourself must call it."),
    ("data.missing-set-epoch", "accelerate"): (
        " Accelerate: a DataLoader built with shuffle=True (no DistributedSampler) and passed through "
        "accelerator.prepare(...) is sharded and gets its epoch set on every pass; a loader you iterate without "
        "prepare needs sampler.set_epoch(epoch)."),
}


def _fetched_overlap(record: RunRecord, data: dict[int, RankData], ranks: list[int], key: tuple,
                     loaders: dict[int, dict], lps: dict[int, dict], idx: dict[int, list[int]], dup: int,
                     n: int | None, mapped: bool) -> Finding:
    k = key[-1]
    first = loaders[ranks[0]]
    sets = {r: set(v) for r, v in idx.items()}
    complete = all(_complete(loaders[r], lp) for r, lp in lps.items())
    whole = bool(n) and complete and all(len(s) >= (n or 0) - int(lps[r].get("maxb") or 1) * len(ranks)
                                         for r, s in sets.items())
    made = {l.get("made_by") for l in loaders.values()} - {None}
    by = f" ({', '.join(sorted(str(m) for m in made))} built it)" if made else ""
    ev: dict[str, Any] = {"pass": k, "overlap_samples": dup, "dataset_len": n, "fetched": {r: len(v) for r, v in idx.items()},
                          "layers": _layer(first), "made_by": sorted(made) or None}
    if whole:
        culprits = tuple(ranks)
        shard = first.get("shard")
        what = (f"{(shard or {}).get('by', '')} {shard.get('layer')}".strip() if shard else
                f"DataLoader without DistributedSampler ({_layer(first)})")
        msg = (f"{what}{by}: every rank iterated all {n} samples of the same data set in pass {k}, so each "
               f"sample is seen {len(ranks)}x per epoch")
        hint = ("Use DistributedSampler(dataset) as the DataLoader's sampler (and call set_epoch each epoch), or "
                "give each rank its own shard of the data.")
        ev["overlap"] = 1.0
    else:
        pairs = [(a, b, len(sets[a] & sets[b])) for i, a in enumerate(ranks) for b in ranks[i + 1:]]
        shared = [(a, b, m) for a, b, m in pairs if m]
        culprits = tuple(sorted({x for a, b, _m in shared for x in (a, b)})) or tuple(ranks)
        a, b, m = max(shared, key=lambda t: t[2]) if shared else (ranks[0], ranks[-1], 0)
        src = "their Subsets" if mapped else f"the DataLoader ({_layer(first)}){by}"
        msg = (f"the ranks' shards overlap: in pass {k} ranks {a} and {b} fetched {m} of the same samples from "
               f"{src} ({len(shared)} overlapping pair(s) among {ranks_phrase(culprits)})")
        hint = ("Make the per-rank shards disjoint (DistributedSampler with the same data set and seed on every rank, "
                "or indices[rank::world_size]).")
        ev["pairs"] = len(shared)
    hint += _framework_hint(record, "data.shard-overlap", loaders)
    locs = tuple(l for r in ranks if (l := loc(r, loaders[r].get("site"), "DataLoader")))
    return Finding("data.shard-overlap", "error", msg, hint, tuple(ranks), locs, ev, culprits=culprits)


def _stream_overlap(record: RunRecord, ranks: list[int], key: tuple, loaders: dict[int, dict],
                    lps: dict[int, dict]) -> Finding:
    """An IterableDataset has no indices to compare: every rank's first batch of the pass was the same."""
    k = key[-1]
    msg = (f"every rank read the same stream from its IterableDataset in pass {k} (the first batch is identical "
           f"on {ranks_phrase(ranks)}): the data is not sharded by rank, so each sample is trained on "
           f"{len(ranks)}x per epoch")
    hint = ("An IterableDataset must shard itself: skip to this rank's part in __iter__ (e.g. "
            "`itertools.islice(stream, rank, None, world_size)`, and by worker with get_worker_info()), or use "
            "a map-style Dataset with DistributedSampler.")
    hint += _framework_hint(record, "data.shard-overlap", loaders)
    locs = tuple(l for r in ranks if (l := loc(r, loaders[r].get("site"), "DataLoader")))
    ev = {"pass": k, "first_batch": lps[ranks[0]].get("first_batch"), "iterable": True}
    return Finding("data.shard-overlap", "error", msg, hint, tuple(ranks), locs, ev, culprits=tuple(ranks))


def _fetched_gaps(record: RunRecord, data: dict[int, RankData], ranks: list[int], key: tuple,
                  loaders: dict[int, dict], lps: dict[int, dict], gaps: int, n: int) -> Finding:
    k = key[-1]
    first = loaders[ranks[0]]
    chain = first.get("chain") or []
    shard = first.get("shard") or {}
    if shard and "DistributedSampler" in chain:
        why = (f"{shard.get('by', 'the framework').capitalize()} shards the batches ({shard.get('layer')}) of a "
               f"DataLoader whose DistributedSampler already gave each rank its shard, so each rank trains on "
               f"1/{len(ranks)} of its shard")
        hint = "Shard once: drop the DistributedSampler (use shuffle=True) and let the framework shard the batches."
    else:
        why = f"the ranks' shards ({_layer(first)}) do not cover the data set"
        hint = ("Give the ranks shards that together cover the data set: DistributedSampler(dataset) over the same "
                "data set on every rank, with nothing else sharding it again.")
    hint += _framework_hint(record, "data.shard-gaps", loaders)
    fetched = {r: int(lp.get("n") or 0) for r, lp in lps.items()}
    locs: list[Location] = []
    for r in ranks:
        sid = loaders[r].get("sampler_sid")
        init = next((e for e in data[r].inits.values() if sid is not None and e.get("sid") == sid), {})
        for site, role in ((loaders[r].get("site"), "DataLoader"), (init.get("site"), "sampler built")):
            if (l := loc(r, site, role)) and all((x.rank, x.file, x.line) != (l.rank, l.file, l.line) for x in locs):
                locs.append(l)
    return Finding("data.shard-gaps", "error",
                   f"pass {k}: the ranks together fetched {n - gaps} of the {n} samples; {gaps} are never trained "
                   f"on in an epoch: {why}", hint, tuple(ranks), tuple(locs),
                   {"pass": k, "gaps": gaps, "dataset_len": n, "fetched": fetched, "layers": _layer(first)},
                   culprits=tuple(ranks))


def _overlap_finding(record: RunRecord, data: dict[int, RankData], ps: dict[int, Pass], k: int, overlap: int,
                     gaps: int, n: int) -> Finding:
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
        hint = ("Build the same data set (same files, filtering and order) on every rank before DistributedSampler; "
                "to give each rank its own files instead, drop DistributedSampler and load only that rank's shard.")
        ev["dataset_lens"] = lens
    elif len(set(seeds.values())) > 1:
        culprits = _minority(seeds)
        why = f"the samplers' seeds differ ({_grouped(seeds)})"
        hint = "Give every rank's DistributedSampler the same seed (the default 0); vary set_epoch, not the seed."
        ev["seeds"] = seeds
    elif any(v != world for v in reps.values()) or len(set(srank.values())) < len(ranks) or \
            any(srank[r] != r for r in ranks if isinstance(srank[r], int)):
        bad = {r for r in ranks if reps[r] != world}
        dup = Counter(srank.values())
        bad |= {r for r in ranks if dup[srank[r]] > 1 or srank[r] != r}
        culprits = tuple(sorted(bad)) or tuple(ranks)
        why = (f"num_replicas/rank do not match the process group (world size {world}; num_replicas "
               f"{_grouped(reps)}; rank {_grouped(srank)})")
        hint = ("Let DistributedSampler take num_replicas and rank from the process group (pass neither), or pass "
                "dist.get_world_size() and dist.get_rank().")
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
    locs = tuple(l for r in ranks
                 if (l := loc(r, (data[r].inits.get(ps[r].ordinal) or {}).get("site") or ps[r].e.get("site"),
                              "sampler built")))
    return Finding("data.shard-overlap", "error",
                   f"pass {k} of the DistributedSampler: the ranks' shards overlap by {overlap} samples and miss {gaps} "
                   f"of {n}: {why}", hint, tuple(ranks), locs, ev, culprits=culprits)


def _grouped(values: dict[int, Any]) -> str:
    groups: dict[str, list[int]] = defaultdict(list)
    for r, v in values.items():
        groups[repr(v)].append(r)
    return ", ".join(f"{v} on {ranks_phrase(rs)}" for v, rs in sorted(groups.items(), key=lambda kv: min(kv[1])))


# -- uneven batches -------------------------------------------------------------------------------------------

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
    else:   # older records: the first DataLoader each rank iterated
        dl_lens = {r: [e.get("len") for e in rec.events if e.get("kind") == "dataloader"]
                   for r, rec in record.ranks.items()}
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
        hint = (f"Give every rank the same number of samples (DistributedSampler(dataset, drop_last=True), or trim "
                f"each shard to the shortest), {join}.")
    locs = tuple(l for r in culprits if r in firsts and (l := loc(r, firsts[r].get("site"), "DataLoader")))
    return [Finding("data.uneven-batches", "warning",
                    f"ranks have different numbers of batches per epoch ({_grouped(batches)}): {cause}; "
                    f"{ranks_phrase(culprits)} run(s) extra DDP steps whose all-reduce the others never join "
                    "(see hang.uneven-batches)", hint, tuple(ranks), locs, ev, culprits=culprits)]
