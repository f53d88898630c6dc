"""Where a multi-node job's store is (launch/jobstore/, its pure part; the JobLink thread is exercised by
the e2e multi-node tests): none for a single node, the rendezvous endpoint's port + 1, the master address,
an explicit --job-store or DDPDOCTOR_JOB_STORE, IPv6 addresses; the node a run directory is."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from ddpdoctor.analysis.config import Config
from ddpdoctor.launch.jobstore import (
    JobLink,
    JudgeRole,
    MemberRole,
    StoreAddr,
    node_of,
    owner_mismatch,
    owner_value,
    resolve,
    store_address,
)
from ddpdoctor.record.reader import RankRecord, RunRecord


def test_a_single_node_or_standalone_run_has_no_job_store() -> None:
    assert resolve(["--nproc-per-node", "2", "--standalone"], {}) is None
    assert resolve(["--nnodes", "1", "--master-addr", "n0"], {}) is None
    assert resolve(["--nnodes", "2"], {}) is None  # no rendezvous host known


def test_the_store_sits_beside_the_rendezvous() -> None:
    args = ["--nnodes", "1:4", "--rdzv-endpoint", "n0:29400", "--rdzv-id", "job7"]
    assert resolve(args, {}) == StoreAddr("n0", 29401, "job7", 4, "rdzv-endpoint")
    args = ["--nnodes=2", "--master-addr=10.0.0.1", "--master-port", "1234"]
    assert resolve(args, {}) == StoreAddr("10.0.0.1", 1235, "10.0.0.1:1234", 2, "master-addr")
    assert resolve(["--nnodes", "2", "--rdzv-endpoint", "[fe80::1]:5000"], {}) == StoreAddr(
        "fe80::1", 5001, "fe80::1:5000", 2, "rdzv-endpoint"
    )


def test_an_explicit_store_address_wins() -> None:
    args = ["--nnodes", "2", "--master-addr", "n0"]
    assert resolve(args, {"DDPDOCTOR_JOB_STORE": "store:7000"}) == StoreAddr(
        "store", 7000, "n0:29500", 2, "DDPDOCTOR_JOB_STORE"
    )
    assert resolve(args, {"DDPDOCTOR_JOB_STORE": "store:7000"}, option="opt:8000").source == "--job-store"
    assert resolve(args, {}, option="no-port") is None
    assert store_address("h:0") is None and store_address("h:70000") is None and store_address("[::1]:9") == ("::1", 9)


def test_node_of_reads_the_ranks_start_events() -> None:
    ranks = {r: RankRecord(r, events=[{"kind": "start", "node_rank": 1, "host": "gpu08"}]) for r in (4, 5)}
    assert node_of(RunRecord("/run", {}, ranks, [])) == (1, "gpu08", [4, 5])
    mixed = {**ranks, 6: RankRecord(6, events=[{"kind": "start", "node_rank": 2, "host": "gpu08"}])}
    assert node_of(RunRecord("/run", {}, mixed, []))[0] is None


def test_an_owner_value_tells_two_jobs_apart() -> None:
    assert owner_mismatch(owner_value("8.0", "n0"), "8.0") is None
    assert owner_mismatch(owner_value("8.0", "n0"), "9.0") == "it serves job '8.0'"
    assert owner_mismatch(None, "9.0") == "it is not a ddpdoctor job store (no owner value)"
    assert owner_mismatch(b"\xff", "9.0") == "its owner value does not decode"


def test_a_node_never_joins_another_jobs_store(tmp_path: Path) -> None:
    """Two jobs on one host:port (two SLURM jobs on one node, two torchruns given one endpoint): the second
    job's node finds the store held by the first, says so in one line, and judges its own ranks."""
    import gc

    from helpers import free_port

    port = free_port()
    said: dict[str, list[str]] = {"a": [], "b": []}
    links = {}
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            addr = StoreAddr("127.0.0.1", port, f"job-{name}", 2, "rdzv-endpoint")
            links[name] = JobLink(addr, str(tmp_path / name), Config(timeout=20), said[name].append)
            deadline = time.time() + 20
            while links[name].state == "connecting" and time.time() < deadline:
                time.sleep(0.05)
        assert links["a"].state == "linked" and links["a"].judge
        assert links["b"].state == "foreign" and not links["b"].linked()
        assert said["b"] == [
            f"job store 127.0.0.1:{port} is not this job's (it serves job 'job-a'; this job is 'job-b'): not "
            "joined; this node judges its own ranks only"
        ]
        links["b"].finish(RunRecord(str(tmp_path / "b"), {}, {}, []))
        notes = [json.loads(x) for x in (tmp_path / "b" / "monitor.jsonl").read_text().splitlines()]
        assert any(n.get("foreign") and n.get("unreachable") for n in notes)  # multinode.partial-view reads it
    finally:
        for link in links.values():
            link.close()
        gc.unfreeze()


def test_a_node_judged_elsewhere_points_at_the_judges_report() -> None:
    member = MemberRole.__new__(MemberRole)  # no thread, no store: the state after the exchange of records
    member.fetched, member.job = True, {"node": 0, "host": "n0", "run_dir": "/runs/hang-8.0-n0"}
    assert member.judged_by() == "node 0 (n0), its records in /runs/hang-8.0-n0"
    member.fetched = False  # the exchange did not finish: this node's report is its own
    assert member.judged_by() is None
    assert JudgeRole.__new__(JudgeRole).judged_by() is None  # the judge's report is its own


def test_a_one_node_run_drives_the_monitor_through_the_solo_role(tmp_path: Path) -> None:
    """A one-node run's part in the job is the SoloRole null object: the monitor's poll and verdict run on
    it unbranched (monitor.py tests no ``if job``) and give exactly the live detectors' answer."""
    from builder import RunBuilder, pending

    from ddpdoctor.analysis import live
    from ddpdoctor.launch import monitor
    from ddpdoctor.launch.jobstore import SoloRole, link
    from ddpdoctor.record.reader import RunReader

    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        b.start(r)
    b.coll(0, 5, 31).coll(1, 5, 33, op="barrier", shapes=())
    b.hb(0, 10.0, 4, pending=pending("all_reduce", 5, 31, 7.0), step=4)
    b.hb(1, 10.0, 4, pending=pending("barrier", 5, 33, 7.0, shapes=()), step=4)
    cfg = Config()
    job = link(["--nproc-per-node", "2", "--standalone"], str(tmp_path / "run"), cfg, lambda _m: None)
    assert isinstance(job, SoloRole) and not job.linked() and not job.due(10.2)
    reads: list[bool] = []
    reader = RunReader(str(tmp_path / "run"))

    def refresh(full: bool = True) -> RunRecord:
        reads.append(full)
        return reader.refresh(full=full)

    record, merged = monitor.poll_records(refresh, job, 10.2)
    assert merged is record and reads == [False, True]  # ranks wait: the ledgers are read for the proof
    job.update(record, 10.2)
    got = job.verdict(merged, 10.2)
    assert got is not None and got == live.live_verdict(record, cfg, 10.2) and got[0] == "certain"
    job.after_dumps()
    job.stopping("--steps 3 reached")
    assert job.fresh(10.2) and job.stop_rule() is None and job.states(merged, 10.2) is None
    assert not job.table_wanted() and job.job_table() is None
    job.finish(record)
    assert job.judged_by() is None
    src = (Path(monitor.__file__)).read_text()
    assert not re.search(r"\b(if|and|or|not) job\b(?!\.)", src)  # the monitor never asks which part it plays


def test_link_states_move_one_way() -> None:
    """The link leaves CONNECTING once (linked, unreachable or another job's store), leaves LINKED only on
    a failure or the close after the run; UNREACHABLE, FOREIGN and CLOSED are final."""
    import threading

    from ddpdoctor.launch.jobstore import LinkState, Transport

    S = LinkState
    assert S.CONNECTING.may_become(S.LINKED) and S.CONNECTING.may_become(S.FOREIGN)
    assert S.CONNECTING.may_become(S.UNREACHABLE) and not S.CONNECTING.may_become(S.CLOSED)
    assert S.LINKED.may_become(S.UNREACHABLE) and S.LINKED.may_become(S.CLOSED)
    assert not S.LINKED.may_become(S.CONNECTING) and not S.LINKED.may_become(S.FOREIGN)
    for final in (S.UNREACHABLE, S.FOREIGN, S.CLOSED):
        assert final.may_become(final)
        assert not any(final.may_become(s) for s in S if s is not final)
    assert S.LINKED == "linked" and f"{S.FOREIGN}" == "foreign" and json.dumps(S.CLOSED) == '"closed"'
    tr = Transport(StoreAddr("127.0.0.1", 1, "j", 2, "test"), threading.Event())
    assert tr.state is S.CONNECTING and not tr.linked()
    assert tr.become(S.LINKED) and tr.linked()
    tr.close()  # after the run
    assert tr.state is S.CLOSED and not tr.become(S.LINKED)  # a late connection does not relink
    tr = Transport(StoreAddr("127.0.0.1", 1, "j", 2, "test"), threading.Event())
    assert tr.become(S.UNREACHABLE)
    tr.close()  # closing a link that never answered keeps why
    assert tr.state is S.UNREACHABLE
