"""Parameters and buffers that differ across ranks, and seeds. Pure.

Fingerprints (two float64 sums per tensor) are taken right after DDP construction and on the
schedule of ``rank/probes/check/install.fingerprint_due`` (the same forwards on every rank), after DDP's own buffer sync, so on a correct job they are bitwise equal on every rank.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.analysis.ids import DRIFT_BUFFERS, DRIFT_INIT_MISMATCH, DRIFT_PARAMETERS, SEED_IDENTICAL_STREAMS
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def _ddp(record: RunRecord, model: int = 0) -> dict[int, dict[str, Any]]:
    out = {}
    for r, rec in record.ranks.items():
        e = next((e for e in rec.checks if e.get("kind") == schema.K_DDP and int(e.get("model", 0)) == model), None)
        if e:
            out[r] = e
    return out


def _models(record: RunRecord) -> list[int]:
    return sorted(
        {int(e.get("model", 0)) for rec in record.ranks.values() for e in rec.checks if e.get("kind") == schema.K_DDP}
    )


def _first_diff(record: RunRecord, part: str, model: int = 0) -> tuple[int, str, list[str], dict[int, Any]] | None:
    """(step, where, differing tensor names, per-rank fingerprints) at the first step they differ."""
    by_step: dict[tuple, dict[int, dict]] = defaultdict(dict)
    fwd: dict[tuple, int] = {}  # the forward number to show for a key
    for r, rec in record.ranks.items():
        for e in rec.fingerprints:
            if int(e.get("model", 0)) == model:
                # ranks at the same collective position made the same steps (model.join(), uneven eval
                # forwards and the like shift their forward counts, not their positions)
                key = e.get("seq") if e.get("where") == "forward" and e.get("seq") is not None else e.get("step", 0)
                by_step[(key, e.get("where", ""))][r] = e.get(part) or {}
                fwd.setdefault((key, e.get("where", "")), int(e.get("step", 0)))
    for (key, where), fps in sorted(by_step.items(), key=lambda kv: (kv[0][0], kv[0][1] != "ddp-init")):
        step = fwd[(key, where)]
        if len(fps) < max(2, len(record.ranks)):
            continue
        names = sorted(set().union(*fps.values()))
        diff = [n for n in names if len({tuple(f.get(n) or ()) for f in fps.values()}) > 1]
        if diff:
            return step, where, diff, fps
    return None


def _odd_ranks(fps: dict[int, Any], names: list[str]) -> tuple[int, ...]:
    """The ranks whose fingerprints differ from the most common ones (all ranks when no majority)."""
    keys = {r: tuple(tuple(f.get(n) or ()) for n in names) for r, f in fps.items()}
    counts: dict[tuple, int] = defaultdict(int)
    for k in keys.values():
        counts[k] += 1
    top = max(counts.values())
    if list(counts.values()).count(top) > 1:
        return tuple(sorted(keys))
    common = next(k for k, c in counts.items() if c == top)
    return tuple(sorted(r for r, k in keys.items() if k != common))


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """The drift findings: parameters, buffers or RNG streams that differ across ranks, and seeding."""
    out: list[Finding] = []
    for model in _models(record):
        out += _detect_model(record, model)
    return out


def _detect_model(record: RunRecord, model: int) -> list[Finding]:
    ddp = _ddp(record, model)
    if len(ddp) < 2:
        return []
    out: list[Finding] = []
    ranks = tuple(sorted(ddp))
    site = {r: loc(r, e.get("site"), "DDP constructed") for r, e in ddp.items()}
    which = (
        "" if len(_models(record)) < 2 else f" of the DDP model built at {_short(next(iter(ddp.values())).get('site'))}"
    )
    pdiff = _first_diff(record, "params", model)
    if pdiff:
        step, where, names, fps = pdiff
        odd = _odd_ranks(fps, names)
        init_sync_off = any(e.get("init_sync") is False for e in ddp.values())
        shown = ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
        if where == "ddp-init":
            seeds = _seed_sites(record)
            why = (
                "init_sync=False, so DDP did not broadcast rank 0's initial weights"
                if init_sync_off
                else "parameters differ right after DDP construction"
            )
            locs = tuple(l for l in site.values() if l) + tuple(l for l in seeds.values() if l)
            out.append(
                Finding(
                    DRIFT_INIT_MISMATCH,
                    "error",
                    f"model initialisation{which} differs across ranks ({why}): {shown}",
                    "Seed every rank the same before building the model, or keep init_sync=True (the "
                    "default) so DDP broadcasts rank 0's weights.",
                    ranks,
                    locs,
                    {"tensors": names, "init_sync": not init_sync_off},
                    culprits=ranks,
                )
            )
        else:
            out.append(
                Finding(
                    DRIFT_PARAMETERS,
                    "error",
                    f"parameters{which} diverged across ranks by DDP forward {step} ({ranks_phrase(odd)} "
                    f"differ{'s' if len(odd) == 1 else ''} from the rest): {shown}",
                    "A parameter was changed on some ranks only (an in-place edit under `if rank == 0`, "
                    "a rank-local update outside DDP, or a backward run inside no_sync() and never "
                    "synced): change parameters only through the optimizer, identically on every rank.",
                    ranks,
                    tuple(l for l in site.values() if l),
                    {"tensors": names, "since_forward": step},
                    culprits=odd,
                )
            )
    bdiff = _first_diff(record, "buffers", model)
    if bdiff:
        step, where, names, fps = bdiff
        no_sync = [r for r, e in ddp.items() if not e.get("forward_sync_buffers", True)]
        bn = any(e.get("batchnorm") for e in ddp.values())
        cause = (
            (
                "forward_sync_buffers/broadcast_buffers is off"
                + (" and the model has BatchNorm running stats" if bn else "")
            )
            if no_sync
            else "buffers changed on some ranks only"
        )
        shown = ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
        culprits = ranks if no_sync else _odd_ranks(fps, names)
        out.append(
            Finding(
                DRIFT_BUFFERS,
                "error",
                f"buffers{which} differ across ranks by DDP forward {step} ({cause}): {shown}",
                "Keep broadcast_buffers / forward_sync_buffers on, or convert BatchNorm with "
                "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model); evaluation then uses the same "
                "statistics on every rank.",
                ranks,
                tuple(l for l in site.values() if l),
                {"tensors": names, "since_forward": step, "forward_sync_buffers": not no_sync, "batchnorm": bn},
                culprits=culprits,
            )
        )
    first = {
        r: next((e.get("rng") for e in rec.checks if e.get("kind") == schema.K_RNG_FIRST_STEP), None)
        or ddp[r].get("rng")
        or {}
        for r, rec in record.ranks.items()
        if r in ddp
    }
    same = [
        k
        for k in ("torch", "random", "numpy", "cuda")
        if all(k in g for g in first.values()) and len({g[k] for g in first.values()}) == 1
    ]
    if not pdiff and same and model == 0:
        out.append(
            Finding(
                SEED_IDENTICAL_STREAMS,
                "note",
                f"every rank has the same {', '.join(same)} RNG state at its first DDP step: dropout and "
                "random augmentation draw identical streams on all ranks",
                "Usual and harmless; to decorrelate augmentation, seed each rank with seed + rank after "
                "building the model.",
                ranks,
                (),
                {"identical": same, "rng_first_step": {str(r): g for r, g in first.items()}},
                culprits=(),  # usual and harmless: no rank is at fault
            )
        )
    return out


def _short(site: Any) -> str:
    if isinstance(site, (list, tuple)) and len(site) >= 2:
        return f"{str(site[0]).rsplit('/', 1)[-1]}:{site[1]}"
    return "?"


def _seed_sites(record: RunRecord) -> dict[int, Any]:
    out = {}
    for r, rec in record.ranks.items():
        e = next((e for e in rec.checks if e.get("kind") == schema.K_SEED), None)
        if e:
            out[r] = loc(r, e.get("site"), f"manual_seed({e.get('seed')})")
    return out
