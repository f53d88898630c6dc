"""Drift across ranks from DDP records and fingerprints: equal fingerprints give no finding; a difference
right after DDP construction is drift.init-mismatch, a later one drift.parameters naming the odd rank,
unsynced buffers drift.buffers; identical RNG streams are a note."""

from __future__ import annotations

from ddpdoctor.analysis.check.drift import detect
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import RankRecord, RunRecord

SITE = ["/work/train.py", 25, "main"]


def _ddp(rank: int, **kw) -> dict:
    return {"kind": "ddp", "model": 0, "site": SITE, "rng": {"torch": f"t{rank}"}, **kw}


def _fp(step: int, where: str, params: dict, buffers: dict | None = None, seq: int | None = None) -> dict:
    return {
        "kind": "fp",
        "model": 0,
        "step": step,
        "where": where,
        "seq": seq,
        "params": params,
        "buffers": buffers or {},
    }


def _record(checks: dict[int, list[dict]], fps: dict[int, list[dict]]) -> RunRecord:
    ranks = {r: RankRecord(r, checks=c, fingerprints=fps.get(r, [])) for r, c in checks.items()}
    return RunRecord("/run", {"command": "check"}, ranks, [])


def _ids(found) -> list[str]:
    return [f.id for f in found]


def test_bitwise_equal_fingerprints_give_no_finding() -> None:
    w = {"w": [1.5, 2.5], "b": [0.0, 0.0]}
    fps = {r: [_fp(0, "ddp-init", w), _fp(10, "forward", w, {"bn.mean": [1.0, 1.0]}, seq=40)] for r in (0, 1)}
    assert detect(_record({0: [_ddp(0)], 1: [_ddp(1)]}, fps), Config()) == []


def test_weights_differing_at_construction_with_init_sync_off_are_an_init_mismatch() -> None:
    fps = {0: [_fp(0, "ddp-init", {"w": [1.0, 2.0]})], 1: [_fp(0, "ddp-init", {"w": [1.1, 2.0]})]}
    seed = {"kind": "seed", "seed": 1234, "site": ["/work/train.py", 12, "main"]}
    rec = _record({0: [_ddp(0, init_sync=False), seed], 1: [_ddp(1, init_sync=False)]}, fps)
    (f,) = detect(rec, Config())
    assert f.id == "drift.init-mismatch" and f.severity == "error" and f.culprits == (0, 1)
    assert "init_sync=False, so DDP did not broadcast rank 0's initial weights" in f.message
    assert f.message.endswith(": w")
    assert (0, 12, "manual_seed(1234)") in [(l.rank, l.line, l.role) for l in f.locations]
    assert f.evidence["init_sync"] is False


def test_a_rank_whose_weights_diverge_later_is_the_one_culprit() -> None:
    same, odd = {"w": [1.0, 2.0]}, {"w": [1.0, 2.5]}
    fps = {r: [_fp(0, "ddp-init", same), _fp(5, "forward", odd if r == 2 else same, seq=30)] for r in (0, 1, 2)}
    (f,) = detect(_record({r: [_ddp(r)] for r in (0, 1, 2)}, fps), Config())
    assert f.id == "drift.parameters" and f.culprits == (2,)
    assert "diverged across ranks by DDP forward 5 (rank 2 differs from the rest): w" in f.message
    assert f.evidence == {"tensors": ["w"], "since_forward": 5}


def test_two_ranks_disagreeing_have_no_majority_so_both_are_named() -> None:
    fps = {0: [_fp(3, "forward", {"w": [1.0, 1.0]}, seq=9)], 1: [_fp(3, "forward", {"w": [2.0, 1.0]}, seq=9)]}
    (f,) = detect(_record({0: [_ddp(0)], 1: [_ddp(1)]}, fps), Config())
    assert f.id == "drift.parameters" and f.culprits == (0, 1) and "2 ranks [0,1] differ from" in f.message


def test_buffers_unsynced_with_batchnorm_blame_every_rank() -> None:
    w = {"w": [1.0, 1.0]}
    fps = {r: [_fp(4, "forward", w, {"bn.running_mean": [float(r), 0.0]}, seq=8)] for r in (0, 1)}
    checks = {r: [_ddp(r, forward_sync_buffers=False, batchnorm=True)] for r in (0, 1)}
    (f,) = detect(_record(checks, fps), Config())
    assert f.id == "drift.buffers" and f.culprits == (0, 1)
    assert "(forward_sync_buffers/broadcast_buffers is off and the model has BatchNorm running stats)" in f.message
    assert f.evidence["forward_sync_buffers"] is False and f.evidence["batchnorm"] is True


def test_long_lists_of_tensors_are_cut_to_six_names() -> None:
    a = {f"layer{i}": [1.0, 0.0] for i in range(8)}
    b = {f"layer{i}": [2.0, 0.0] for i in range(8)}
    (f,) = detect(
        _record({0: [_ddp(0)], 1: [_ddp(1)]}, {0: [_fp(0, "ddp-init", a)], 1: [_fp(0, "ddp-init", b)]}), Config()
    )
    assert f.message.endswith("layer5 (+2 more)") and len(f.evidence["tensors"]) == 8


def test_identical_rng_streams_are_a_note() -> None:
    same = {"torch": "abc", "random": "def", "numpy": "x"}
    checks = {r: [_ddp(r, rng=dict(same, numpy=f"n{r}"))] for r in (0, 1)}
    (f,) = detect(_record(checks, {}), Config())
    assert f.id == "seed.identical-streams" and f.severity == "note"
    assert f.message.startswith("every rank has the same torch, random RNG state")
    assert f.evidence["identical"] == ["torch", "random"]


def test_one_rank_with_ddp_is_nothing_to_compare() -> None:
    fps = {0: [_fp(0, "ddp-init", {"w": [1.0, 1.0]})], 1: [_fp(0, "ddp-init", {"w": [9.0, 1.0]})]}
    assert detect(_record({0: [_ddp(0)], 1: []}, fps), Config()) == []
