"""The check records of one rank read as sampler passes and loaders, and the helpers the data findings share. Pure."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.findings import ranks_phrase
from ddpdoctor.analysis.ids import DATA_MISSING_SET_EPOCH, DATA_SHARD_GAPS, DATA_SHARD_OVERLAP
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

PEEK_FALLBACK = 0.1  # without the loader's batch size, a pass that used at most this share is a peek


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
    passes: dict[int, list[Pass]]  # sampler ordinal -> passes in order
    inits: dict[int, dict[str, Any]]  # sampler ordinal -> sampler_init event
    set_epochs: dict[int, list[dict[str, Any]]]  # sampler ordinal -> set_epoch events
    loaders: list[dict[str, Any]]  # loader events in order
    trained_loaders: dict[int, set[str]]  # loader ordinal -> {"step", "fwd"}
    has_optimizer: bool
    has_marks: bool  # the rank recorded training marks (newer records)
    lpasses: list[dict[str, Any]] = field(default_factory=list)  # loader_pass events (what was fetched)


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
        if kind == schema.K_LOADER_PASS:
            lpasses.append(e)
            continue
        if kind == schema.K_SAMPLER_INIT:
            inits[int(e.get("ordinal", len(inits)))] = e
        elif kind == schema.K_SAMPLER:
            o = e.get("ordinal")
            if o is None:  # records without ordinals: one sampler per id
                o = sid_ordinal.setdefault(e.get("sid", 0), len(sid_ordinal))
            o = int(o)
            k = int(e.get("k", len(passes[o])))
            p = Pass(o, k, e)
            passes[o].append(p)
            by_key[(o, k)] = p
        elif kind == schema.K_SAMPLER_END:
            pe = by_key.get((int(e.get("ordinal", -1)), int(e.get("k", -1))))
            if pe is not None:
                pe.end = e
                has_marks = True
                if e.get("steps"):
                    pe.by.add("step")
                if e.get("fwds"):
                    pe.by.add("fwd")
        elif kind == schema.K_SAMPLER_TRAIN:
            has_marks = True
            pt = by_key.get((int(e.get("ordinal", -1)), int(e.get("k", -1))))
            if pt is not None:
                pt.by.add(str(e.get("by")))
        elif kind == schema.K_SET_EPOCH:
            set_epochs[int(e.get("ordinal", -1))].append(e)
        elif kind == schema.K_LOADER:
            loaders.append(e)
        elif kind == schema.K_LOADER_TRAIN:
            has_marks = True
            trained_loaders[int(e.get("ordinal", -1))].add(str(e.get("by")))
        elif kind == schema.K_OPTSTEP or (kind == schema.K_ACCUM_SUMMARY and e.get("opt_steps")):
            has_opt = True
    return RankData(passes, inits, set_epochs, loaders, trained_loaders, has_opt, has_marks, lpasses)


def _trained(d: RankData, by: set[str]) -> bool:
    if not d.has_marks:
        return True  # older records: every pass counts
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
    return [
        p
        for i, p in enumerate(seq)
        if _trained(d, p.by) and not _is_peek(d, p, seq[i + 1] if i + 1 < len(seq) else None)
    ]


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


def _trained_loaders(d: RankData) -> list[dict[str, Any]]:
    if not d.has_marks:
        return d.loaders
    want = "step" if d.has_optimizer else None
    return [
        l
        for l in d.loaders
        if (by := d.trained_loaders.get(int(l.get("ordinal", -1)), set())) and (want is None or want in by)
    ]


def _framework_hint(record: RunRecord, fid: str, loaders: dict[int, dict]) -> str:
    from ddpdoctor.analysis.hang.deadlock import frameworks

    fws = (
        set(frameworks(record))
        | {l.get("made_by") for l in loaders.values() if l.get("made_by")}
        | {(l.get("shard") or {}).get("by") for l in loaders.values() if l.get("shard")}
    )
    return "".join(DATA_FRAMEWORK_HINTS.get((fid, fw), "") for fw in ("lightning", "accelerate") if fw in fws)


DATA_FRAMEWORK_HINTS = {
    (DATA_SHARD_OVERLAP, "lightning"): (
        " Lightning: leave Trainer(use_distributed_sampler=True) (the default), which replaces the sampler of the "
        "loaders you return with a DistributedSampler; with use_distributed_sampler=False, shard the data yourself."
    ),
    (DATA_SHARD_OVERLAP, "accelerate"): (
        " Accelerate: pass the DataLoader to accelerator.prepare(...) and iterate the loader it returns (it shards "
        "the batches per process); do not iterate the original loader."
    ),
    (DATA_SHARD_GAPS, "accelerate"): (
        " Accelerate: give accelerator.prepare(...) a DataLoader with a plain sampler (shuffle=True, no "
        "DistributedSampler): it shards the batches itself."
    ),
    (DATA_SHARD_GAPS, "lightning"): (
        " Lightning: return a plain DataLoader and let Lightning add the DistributedSampler "
        "(use_distributed_sampler=True)."
    ),
    (DATA_MISSING_SET_EPOCH, "lightning"): (
        " Lightning calls set_epoch on the samplers of the loaders it runs; a loop you run yourself must call it."
    ),
    (DATA_MISSING_SET_EPOCH, "accelerate"): (
        " Accelerate: a DataLoader built with shuffle=True (no DistributedSampler) and passed through "
        "accelerator.prepare(...) is sharded and gets its epoch set on every pass; a loader you iterate without "
        "prepare needs sampler.set_epoch(epoch)."
    ),
}


def _grouped(values: dict[int, Any]) -> str:
    groups: dict[str, list[int]] = defaultdict(list)
    for r, v in values.items():
        groups[repr(v)].append(r)
    return ", ".join(f"{v} on {ranks_phrase(rs)}" for v, rs in sorted(groups.items(), key=lambda kv: min(kv[1])))
