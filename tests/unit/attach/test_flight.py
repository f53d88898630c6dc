"""The flight-recorder part of attach (attach/flight.py), without a job: the ring size a rank was given,
where its torch writes its dump, why nothing is taken from a rank whose recorder is off or that offers no
trigger (and no empty fr/ folder left), and the report's one line for what was and was not taken."""

from __future__ import annotations

import os
from pathlib import Path

from ddpdoctor.attach.discover import Job, RankProc
from ddpdoctor.attach.flight import DEBUG_SERVER, Outcome, Taken, dump_file, ring_size, summary, take

NO_PID = 2**22 + 12345  # above the default pid_max: no such process


def _rank(rank: int, env: dict[str, str], pid: int = NO_PID) -> RankProc:
    return RankProc(pid, rank, rank, 2, ["python", "train.py"], "/work", 1.0, env)


def test_ring_size_reads_the_new_name_first() -> None:
    assert ring_size({}) is None
    assert ring_size({"TORCH_NCCL_TRACE_BUFFER_SIZE": "500"}) == 500
    assert ring_size({"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "500"}) == 0
    assert ring_size({"TORCH_FR_BUFFER_SIZE": "lots"}) is None


def test_where_a_rank_writes_its_dump() -> None:
    me = os.getpid()  # a process whose root is "/"
    assert dump_file(_rank(3, {"TORCH_FR_DUMP_TEMP_FILE": "/tmp/fr_"}, me)) == "/tmp/fr_3"
    assert (
        dump_file(_rank(3, {"TORCH_FR_DUMP_TEMP_FILE": "fr/x", "TORCH_FR_DUMP_DYNAMIC_FILE_NAME": "1"}, me))
        == "/work/fr/x"
    )
    assert dump_file(_rank(1, {"HOME": "/home/me"}, me)) == "/home/me/.cache/torch/comm_lib_trace_rank_1"
    assert dump_file(_rank(1, {"XDG_CACHE_HOME": "/c", "HOME": "/h"}, me)) == "/c/torch/comm_lib_trace_rank_1"


def test_nothing_is_taken_from_a_recorder_that_is_off_or_has_no_trigger(tmp_path: Path) -> None:
    job = Job("torchrun", None, [_rank(0, {"TORCH_FR_BUFFER_SIZE": "0"}), _rank(1, {})], 2, 2, None, "k")
    out = take(job, str(tmp_path), timeout=1.0)
    r0, r1 = out.taken
    assert r0.why == "its flight recorder is off (TORCH_FR_BUFFER_SIZE=0): start the job with TORCH_FR_BUFFER_SIZE=2000"
    assert r1.why == f"gloo has no dump trigger and no debug server runs: start the job's ranks with {DEBUG_SERVER}"
    assert out.note.startswith("stacks only, no flight recorder: rank 0: its flight recorder is off")
    assert not (tmp_path / "fr").exists()
    assert out.as_manifest()["ranks"]["1"] == {"how": "", "file": "", "format": "", "entries": 0, "why": r1.why}


def test_the_summary_groups_ranks_by_how_and_why() -> None:
    got = Outcome(
        [
            Taken(0, "torch's debug server", "/r/fr/rank_0", "pickle", 20),
            Taken(1, "torch's debug server", "/r/fr/rank_1", "pickle", 20),
            Taken(2, "NCCL's dump pipe", "/r/fr/rank_2", "json", 5),
            Taken(3, why="no trigger"),
        ],
        earlier=["/r/fr-earlier/rank_2"],
    )
    assert summary(got) == (
        "flight recorder taken from ranks 0, 1 through torch's debug server (pickle); rank 2 through NCCL's dump "
        "pipe (JSON: no stacks, the lines are py-spy's); not from rank 3: no trigger; the dumps the job had "
        "written before are kept in fr-earlier/"
    )
