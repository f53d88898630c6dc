"""The doctor's launch helpers (health/run.py): message sizes parsed (K/M/G are powers of 1024, bad ones
refused), the expected world size, the ranks' result files read (a half-written one skipped), and an
unreachable rendezvous recognised in torchrun's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpdoctor.health.run import _expected_world, _read_ranks, _unreachable, parse_sizes


def test_sizes() -> None:
    assert parse_sizes("64K, 1M,16M,64K") == [65536, 2**20, 16 * 2**20]
    assert parse_sizes("4096,8B") == [8, 4096]
    for bad in ("1X", "4", "", "K"):
        with pytest.raises(ValueError, match="bad size|no sizes"):
            parse_sizes(bad)


def test_expected_world() -> None:
    assert _expected_world({"nnodes": "2"}, ["--nproc-per-node", "4"]) == 8
    assert _expected_world({}, ["--nproc-per-node", "3"]) == 3
    assert _expected_world({"nnodes": "1:2"}, ["--nproc-per-node", "4"]) is None
    assert _expected_world({}, ["--nproc-per-node", "gpu"]) is None


def test_rank_results_are_read_and_a_half_written_one_skipped(tmp_path: Path) -> None:
    d = tmp_path / "ranks"
    d.mkdir()
    (d / "0.json").write_text(json.dumps({"stage": "done"}))
    (d / "1.json").write_text('{"stage": "do')
    (d / "1.json.tmp").write_text("{}")
    assert _read_ranks(str(tmp_path)) == {0: {"stage": "done"}}


def test_an_unreachable_rendezvous_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text("...\ntorch.distributed.DistNetworkError: Connection refused\n")
    assert _unreachable(str(log))
    log.write_text("all fine\n")
    assert not _unreachable(str(log)) and not _unreachable(str(tmp_path / "missing.log"))
