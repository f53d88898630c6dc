"""The check probes in-process, installed on a fake rank-0 probe (tests/fakeprobe.py): what each
DistributedSampler and DataLoader pass handed out and whether it trained, the seeds, the RNG and data
digests; and record/digest.py's running digest of a collective sequence (shared with the analysis)."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeprobe
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.rank import active, sites
from ddpdoctor.rank.probes import check as check_pkg
from ddpdoctor.rank.probes.check import digests, passes
from ddpdoctor.record import digest, schema

HERE = __file__

# what the check probes wrap (class attributes and torch functions): put back after each test
PATCHED = [
    (DistributedSampler, "__init__"),
    (DistributedSampler, "set_epoch"),
    (DistributedSampler, "__iter__"),
    (DataLoader, "__init__"),
    (dl_mod._BaseDataLoaderIter, "__init__"),
    (dl_mod._BaseDataLoaderIter, "_next_index"),
    (dl_mod._BaseDataLoaderIter, "__next__"),
    (torch, "manual_seed"),
    (torch, "save"),
    (DDP, "__init__"),
    (DDP, "_pre_forward"),
]


@pytest.fixture
def checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The check probes of rank 0, installed in this process; everything they wrapped is restored after."""
    for owner, name in PATCHED:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, getattr(owner, name))
    rng_torch, rng_py = torch.get_rng_state(), random.getstate()
    p = fakeprobe.make_probe(tmp_path, {"check": {"every": None}})
    monkeypatch.setattr(active, "probe", p)
    sites.reset_prefixes()
    c = check_pkg.install(p, {"every": None})
    yield c
    fakeprobe.close(p)
    torch.set_rng_state(rng_torch)
    random.setstate(rng_py)


def recs(c: Any, *kind: str) -> list[dict]:
    return fakeprobe.kinds(fakeprobe.records(c.p, schema.CHECKS), *kind)


def here(marker: str) -> int:
    for i, text in enumerate(Path(HERE).read_text().splitlines(), 1):
        if marker in text and "here(" not in text:
            return i
    raise AssertionError(marker)


def test_sampler_built_records_its_sharding_and_the_users_line(checks: Any) -> None:
    ds = list(range(10))
    DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)  # SAMPLER-INIT
    (ev,) = recs(checks, schema.K_SAMPLER_INIT)
    assert (ev["num_replicas"], ev["sampler_rank"], ev["seed"], ev["shuffle"], ev["dataset_len"]) == (2, 1, 3, True, 10)
    assert ev["site"] == [HERE, here("SAMPLER-INIT"), "test_sampler_built_records_its_sharding_and_the_users_line"]


def test_sampler_passes_count_what_was_handed_out_and_what_trained(checks: Any) -> None:
    ds = list(range(10))
    s = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=7)
    s.set_epoch(0)
    full = list(s)  # pass 0: a whole epoch, no training
    peek = next(iter(s))  # pass 1: a peek (one index)
    s.set_epoch(1)
    trained = []
    for i in s:  # pass 2: an epoch with an optimizer step per index
        trained.append(i)
        checks.on_optimizer_step(None)
    drawn = recs(checks, schema.K_SAMPLER)
    assert [d["k"] for d in drawn] == [0, 1, 2]
    assert [d["epoch"] for d in drawn] == [0, 0, 1]
    assert drawn[0]["indices"] == full and drawn[0]["n"] == 5 and drawn[0]["digest"] == passes._digest(full)
    assert drawn[1]["indices"][0] == peek
    assert drawn[2]["indices"] == trained and trained != full  # set_epoch(1) reshuffled
    ends = {e["k"]: e for e in recs(checks, schema.K_SAMPLER_END)}
    assert (ends[0]["consumed"], ends[0]["exhausted"], ends[0]["steps"]) == (5, True, 0)
    assert (ends[1]["consumed"], ends[1]["exhausted"], ends[1]["steps"]) == (1, False, 0)
    assert (ends[2]["consumed"], ends[2]["exhausted"], ends[2]["steps"]) == (5, True, 5)
    # only the pass that stepped the optimizer counts as training (the analysis's epochs)
    assert [(t["k"], t["by"]) for t in recs(checks, schema.K_SAMPLER_TRAIN)] == [(2, "step")]
    assert [e["n"] for e in recs(checks, schema.K_SET_EPOCH)] == [1, 2]
    assert [o["n"] for o in recs(checks, schema.K_OPTSTEP)] == [1, 2, 3, 4, 5]


def test_two_ranks_samplers_partition_the_data_set(checks: Any) -> None:
    ds = list(range(11))
    for r in (0, 1):
        list(DistributedSampler(ds, num_replicas=2, rank=r, shuffle=True, seed=1))
    a, b = recs(checks, schema.K_SAMPLER)
    assert a["sampler_rank"] == 0 and b["sampler_rank"] == 1
    assert a["n"] == b["n"] == 6  # padded to an even split
    assert set(a["indices"]) | set(b["indices"]) == set(range(11))
    assert a["digest"] != b["digest"]


def test_dataloader_pass_records_the_indices_it_fetched_and_its_steps(checks: Any) -> None:
    ds = TensorDataset(torch.arange(12.0))
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=False)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)  # LOADER
    (ev,) = recs(checks, schema.K_LOADER)
    assert (ev["distributed"], ev["sampler"], ev["batches"], ev["batch_size"], ev["dataset_len"]) == (
        True,
        "DistributedSampler",
        2,
        4,
        12,
    )
    assert ev["site"][:2] == [HERE, here("# LOADER")]
    seen = []
    for (x,) in loader:
        seen += x.long().tolist()
        checks.on_optimizer_step(None)
    next(iter(loader))  # a peek: a pass of its own that never trains
    lp = recs(checks, schema.K_LOADER_PASS)
    assert [p["k"] for p in lp] == [0, 1]
    assert (lp[0]["n"], lp[0]["batches"], lp[0]["maxb"], lp[0]["indices"], lp[0]["steps"], lp[0]["exhausted"]) == (
        6,
        2,
        4,
        [0, 2, 4, 6, 8, 10],
        2,
        True,
    )
    assert seen == [0, 2, 4, 6, 8, 10]
    assert (lp[1]["n"], lp[1]["batches"], lp[1]["steps"], lp[1]["exhausted"]) == (4, 1, 0, False)
    assert lp[0]["digest"] != lp[1]["digest"]
    assert [(t["ordinal"], t["by"]) for t in recs(checks, schema.K_LOADER_TRAIN)] == [(0, "step")]


def test_manual_seed_is_recorded_with_its_line(checks: Any) -> None:
    torch.manual_seed(1234)  # SEED-LINE
    (ev,) = recs(checks, schema.K_SEED)
    assert ev["seed"] == 1234 and ev["site"][:2] == [HERE, here("SEED-LINE")]
    assert torch.initial_seed() == 1234  # the wrapper still seeds


def test_rng_digests_equal_for_equal_seeds_and_different_otherwise(checks: Any) -> None:
    def seeded(s: int) -> dict:
        torch.manual_seed(s)
        random.seed(s)
        return digests._rng_digests(torch)

    a, b, c = seeded(42), seeded(42), seeded(43)
    assert a == b
    assert a["torch_initial_seed"] == 42 and c["torch_initial_seed"] == 43
    assert a["torch"] != c["torch"] and a["random"] != c["random"]
    seeded(42)
    torch.rand(3)  # the state moved on: not the state a fresh seed 42 gives
    moved = digests._rng_digests(torch)
    assert moved["torch"] != a["torch"] and moved["random"] == a["random"]


def test_data_fingerprint_tells_equal_data_from_different_data() -> None:
    x = torch.arange(100.0)
    same = digests._data_fingerprint(TensorDataset(x.clone()))
    assert same == digests._data_fingerprint(TensorDataset(x.clone()))
    y = x.clone()
    y[50] += 1
    assert digests._data_fingerprint(TensorDataset(y)) != same
    assert digests._data_fingerprint(TensorDataset(x[:99].clone())) != same
    assert digests._data_fingerprint(object()) is None
    # a batch digest: shapes and sums
    assert digests._batch_digest([x, {"y": y}]) == digests._batch_digest([x.clone(), {"y": y.clone()}])
    assert digests._batch_digest([x]) != digests._batch_digest([y])


# -- record/digest.py: the running digest of a rank's Python-level collectives ------------------------------


def fold_calls(calls: list[tuple]) -> tuple[int, int]:
    d, n = 0, 0
    for op, shapes, site in calls:
        if op in digest.COUNTED_OUT:
            continue
        d = digest.fold(d, digest.op_hash(op, digest.shapes_text(shapes), site))
        n += 1
    return n, d


CALLS = [
    ("all_reduce", [[4, 4]], ["/a/train.py", 30, "step"]),
    ("barrier", [], ["/a/train.py", 31, "step"]),
    ("broadcast", [[8]], ["/a/train.py", 12, "main"]),
]


def test_running_digest_matches_for_the_same_calls_and_differs_on_an_extra_call() -> None:
    a, b = fold_calls(CALLS), fold_calls(list(CALLS))
    assert a == b and a[0] == 3 and a[1] != 0
    extra = fold_calls(CALLS + [("all_reduce", [[4, 4]], ["/a/train.py", 30, "step"])])
    assert extra[0] == 4 and extra[1] != a[1]
    # the prefix is a state of the longer sequence: the ranks agree up to the divergence
    assert fold_calls(CALLS[:2]) == fold_calls((CALLS + CALLS)[:2])
    # order matters
    assert fold_calls(CALLS[::-1])[1] != a[1]


def test_running_digest_counts_line_and_shapes_where_they_must_agree() -> None:
    base = fold_calls(CALLS)[1]
    other_line = [CALLS[0], ("barrier", [], ["/a/train.py", 32, "step"]), CALLS[2]]
    assert fold_calls(other_line)[1] != base
    other_dir = [(op, sh, ["/b/checkout/train.py", *site[1:]]) for op, sh, site in CALLS]
    assert fold_calls(other_dir)[1] == base  # nodes may run different checkouts
    other_shape = [("all_reduce", [[4, 5]], CALLS[0][2]), *CALLS[1:]]
    assert fold_calls(other_shape)[1] != base  # all_reduce's shapes must agree
    assert digest.op_hash("barrier", "[[1]]", CALLS[1][2]) == digest.op_hash("barrier", "[]", CALLS[1][2])
    assert fold_calls(CALLS + [("send", [[4]], ["/a/train.py", 40, "step"])]) == fold_calls(CALLS)  # p2p out
    assert digest.shapes_text([[2, 3], [4]]) == "[[2,3],[4]]" and digest.shapes_text(None) == "[]"
    assert all(0 <= v <= digest.MASK for v in (digest.fold(digest.MASK, 2**32 - 1), base))


def test_running_digest_is_the_same_across_processes() -> None:
    # crc32, not hash(): a fixed value whatever PYTHONHASHSEED
    h = digest.op_hash("all_reduce", "[[4,4]]", ["/x/train.py", 30, "step"])
    import zlib

    assert h == zlib.crc32(b"all_reduce[[4,4]]|train.py:30")
    assert digest.fold(0, h) == h and digest.fold(h, h) == (h * digest.MUL ^ h) & digest.MASK


def test_is_user_path_one_rule_for_both_sides() -> None:
    from ddpdoctor.record.paths import LIB_MARKERS, is_user_path

    assert is_user_path("/home/me/train.py", lib_markers=LIB_MARKERS)
    assert not is_user_path("/usr/lib/python3.11/site-packages/lightning/x.py", lib_markers=LIB_MARKERS)
    assert not is_user_path("<frozen runpy>")
    assert not is_user_path("/opt/lib/torch/nn/x.py", lib_dirs=("/opt/lib/torch/",))
    # the script's folder wins, even inside site-packages
    assert is_user_path(
        "/venv/site-packages/proj/train.py", user_dirs=("/venv/site-packages/proj/",), lib_markers=LIB_MARKERS
    )
    assert sys.modules["ddpdoctor.record.paths"].is_user_path is is_user_path
