"""The data findings (analysis/check/data.py): epochs that change their order give nothing; the same
order every epoch is data.missing-set-epoch (set_epoch never called, or always with one value, or a
sampler rebuilt per epoch), a peek before the loop is not an epoch; differing sampler seeds name the odd
rank; different batch counts are data.uneven-batches unless the script uses join()."""

from __future__ import annotations

from ddpdoctor.analysis.check.data import detect
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import RankRecord, RunRecord

INIT_SITE = ["/w/train.py", 20, "main"]
LOOP_SITE = ["/w/train.py", 31, "main"]


def _init(ordinal: int = 0, t: float = 0.0) -> dict:
    return {"kind": "sampler_init", "ordinal": ordinal, "sid": ordinal, "shuffle": True, "site": INIT_SITE, "t": t}


def _pass(k: int, epoch: int, digest: str, ordinal: int = 0, seed: int = 0, t: float | None = None) -> dict:
    return {"kind": "sampler", "ordinal": ordinal, "k": k, "sid": ordinal, "epoch": epoch, "seed": seed,
            "shuffle": True, "digest": digest, "n": 50, "indices": None, "site": LOOP_SITE,
            "t": float(k if t is None else t)}  # fmt: skip


def _record(checks: dict[int, list[dict]], events: dict[int, list[dict]] | None = None) -> RunRecord:
    ranks = {r: RankRecord(r, checks=c, events=(events or {}).get(r, [])) for r, c in checks.items()}
    return RunRecord("/run", {"command": "check"}, ranks, [])


def _ids(found) -> list[str]:
    return [f.id for f in found]


def test_epochs_with_set_epoch_give_nothing() -> None:
    checks = [_init(), {"kind": "set_epoch", "ordinal": 0, "epoch": 0}, _pass(0, 0, "a"),
              {"kind": "set_epoch", "ordinal": 0, "epoch": 1}, _pass(1, 1, "b")]  # fmt: skip
    assert detect(_record({0: checks, 1: checks}), Config()) == []


def test_the_same_order_every_epoch_without_set_epoch_is_an_error_on_every_rank() -> None:
    checks = [_init(), _pass(0, 0, "a"), _pass(1, 0, "a"), _pass(2, 0, "a")]
    (f,) = detect(_record({0: checks, 1: checks}), Config())
    assert f.id == "data.missing-set-epoch" and f.severity == "error" and f.culprits == (0, 1)
    assert f.message == (
        "DistributedSampler built at train.py:20 gives 3 training epochs the same order: its epoch is 0 each "
        "time (set_epoch is never called); on 2 ranks [0,1]"
    )
    assert {(l.line, l.role) for l in f.locations} == {(20, "sampler built"), (31, "epoch loop")}
    assert f.evidence["set_epoch_calls"] == 0 and f.evidence["rebuilt_per_epoch"] is False


def test_set_epoch_always_with_one_value_is_said() -> None:
    se = {"kind": "set_epoch", "ordinal": 0, "epoch": 0}
    checks = [_init(), se, _pass(0, 0, "a"), se, _pass(1, 0, "a")]
    (f,) = detect(_record({0: checks, 1: checks}), Config())
    assert "(set_epoch is called, always with 0)" in f.message


def test_a_sampler_rebuilt_for_every_epoch_is_said() -> None:
    checks = [_init(0, 0.0), _pass(0, 0, "a", ordinal=0, t=1.0), _init(1, 2.0), _pass(0, 0, "a", ordinal=1, t=3.0)]
    (f,) = detect(_record({0: checks, 1: checks}), Config())
    assert f.id == "data.missing-set-epoch" and f.evidence["rebuilt_per_epoch"] is True
    assert "a new DistributedSampler is built for every epoch and its epoch is never set" in f.message


def test_a_peek_before_the_loop_is_not_an_epoch() -> None:
    peek_end = {"kind": "sampler_end", "ordinal": 0, "k": 0, "consumed": 2, "exhausted": False, "fwds": 0}
    checks = [_init(), _pass(0, 0, "a"), peek_end,
              _pass(1, 0, "a"), {"kind": "sampler_end", "ordinal": 0, "k": 1, "consumed": 50, "exhausted": True, "fwds": 5},
              _pass(2, 1, "b"), {"kind": "sampler_end", "ordinal": 0, "k": 2, "consumed": 50, "exhausted": True, "fwds": 5}]  # fmt: skip
    assert detect(_record({0: checks, 1: checks}), Config()) == []


def test_a_rank_with_another_sampler_seed_is_the_culprit() -> None:
    found = detect(
        _record(
            {0: [_init(), _pass(0, 0, "a")], 1: [_init(), _pass(0, 0, "b")], 2: [_init(), _pass(0, 0, "c", seed=42)]}
        ),
        Config(),
    )
    (f,) = found
    assert f.id == "data.sampler-seed-mismatch" and f.culprits == (2,)
    assert "(seed 0 on 2 ranks [0,1]; seed 42 on rank 2)" in f.message
    assert [(l.rank, l.role) for l in f.locations] == [(0, "seed 0"), (1, "seed 0"), (2, "seed 42")]


def _loader(batches: int, dataset_len: int) -> dict:
    return {"kind": "loader", "ordinal": 0, "distributed": True, "batches": batches, "dataset_len": dataset_len,
            "batch_size": 8, "site": ["/w/train.py", 25, "main"]}  # fmt: skip


def test_more_batches_on_one_rank_is_uneven_unless_join_handles_it() -> None:
    checks = {0: [_loader(10, 160)], 1: [_loader(12, 192)]}
    (f,) = detect(_record(checks), Config())
    assert f.id == "data.uneven-batches" and f.severity == "warning" and f.culprits == (1,)
    assert f.message.startswith(
        "ranks have different numbers of batches per epoch (10 on rank 0, 12 on rank 1): the ranks built data "
        "sets of different lengths (160 on rank 0, 192 on rank 1) for their DistributedSamplers; rank 1 run(s) "
        "extra DDP steps"
    )
    assert [(l.rank, l.line) for l in f.locations] == [(1, 25)]
    join = {0: [{"kind": "join", "site": ["/w/train.py", 40, "main"]}]}
    assert detect(_record(checks, join), Config()) == []
    assert detect(_record({0: [_loader(10, 160)], 1: [_loader(10, 160)]}), Config()) == []
