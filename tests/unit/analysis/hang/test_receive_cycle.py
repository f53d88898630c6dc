"""The policy's receive-cycle rule, asked of the same run directory by the two sources that answer it: the
live monitor (``live_verdict``: a proof, once every wait has lasted the settle time) and the ledger's
post-mortem (``deadlock.detect``, over the run's verdict). Each case pins both sources' answers: every rank
waits to receive and none sends is a p2p deadlock for both, with the same ranks; a send outstanding, a rank
in another call or a rank that ended is none for either. On hand-built run directories (tests/builder.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import deadlock, judge
from ddpdoctor.analysis.hang.facts import ENDED, MISSING, RUNNING, WAITING, Call, RankFacts
from ddpdoctor.analysis.live import live_verdict
from ddpdoctor.record.reader import RunRecord, load_run

CFG = Config(timeout=10.0)
LINES = {0: 40, 1: 41}


def _run(tmp: Path, calls: dict[int, dict | None], finished: tuple[int, ...] = ()) -> RunBuilder:
    """Two ranks, each waiting since t=2.0 in its call (None: busy), seen at t=2.1 and t=4.0; ``finished``
    ranks ended at t=1.5 instead."""
    b = RunBuilder(tmp / "run").start(0).start(1)
    for r, p in calls.items():
        if r in finished:
            b.finish(r, 1.5, seq=1)
            continue
        b.hb(r, 2.1, 1, p, where=LINES[r]).hb(r, 4.0, 1, p, where=LINES[r])
    return b


def _recv(r: int, **kw) -> dict:
    return dict(pending("recv", 1, LINES[r], 2.0, ()), peer=1 - r, **kw)


def _answers(b: RunBuilder, t: float = 4.0) -> tuple[tuple[str, str] | None, list[tuple[str, tuple[int, ...]]]]:
    """The live verdict at ``t``, and the ledger's findings once the monitor stopped the run there."""
    live = live_verdict(load_run(str(b.root)), CFG, t)
    b.add(None, "monitor.jsonl", "verdict", t, mode="certain" if live else "timeout", reason="x")
    record: RunRecord = load_run(str(b.root))
    return live, [(f.id, f.culprits) for f in deadlock.detect(record, CFG)]


def test_every_rank_waiting_to_receive_is_a_p2p_deadlock_for_both_sources(tmp_path):
    live, ledger = _answers(_run(tmp_path, {0: _recv(0), 1: _recv(1)}))
    assert live is not None and live[0] == "certain", live
    assert "every rank waits to receive and none sends" in live[1], live
    assert "rank 0 waits 2.0 s in recv from rank 1" in live[1], live
    assert ledger == [("hang.p2p-deadlock", (0, 1))]


@pytest.mark.parametrize(
    ("calls", "finished"),
    [
        ({0: _recv(0, sends=1), 1: _recv(1)}, ()),  # rank 0's isend is still outstanding: it may arrive
        ({0: _recv(0), 1: pending("all_reduce", 1, LINES[1], 2.0)}, ()),  # rank 1 waits in a collective
        ({0: _recv(0), 1: None}, (1,)),  # rank 1 ended
    ],
    ids=["a-send-outstanding", "a-rank-in-a-collective", "a-rank-that-ended"],
)
def test_no_receive_cycle_for_either_source(tmp_path, calls, finished):
    live, ledger = _answers(_run(tmp_path, calls, finished))
    assert live is None or "every rank waits to receive" not in live[1], live
    assert all(fid != "hang.p2p-deadlock" for fid, _ in ledger), ledger


def test_a_wait_younger_than_the_settle_time_is_no_live_proof(tmp_path):
    """Live, a receive that has not lasted the settle time may be a message on its way: no proof yet. The run
    stopped there is still judged a p2p deadlock afterwards (the verdict says the wait did not end)."""
    live, ledger = _answers(_run(tmp_path, {0: _recv(0), 1: _recv(1)}), t=2.5)
    assert live is None, live
    assert ledger == [("hang.p2p-deadlock", (0, 1))]


def _receiving(r: int, op: str = "recv", sending: bool = False) -> RankFacts:
    return RankFacts(r, WAITING, Call(op, "0", p2p=True, peer=("recv", 1 - r)), sending=sending)


def test_the_one_rule_over_the_facts():
    """``judge.receive_cycle``, the one body both sources ask: every rank waits in a receive, none sends."""
    assert judge.receive_cycle({0: _receiving(0), 1: _receiving(1, "irecv")}) == (0, 1)
    for other in (
        _receiving(1, sending=True),  # its isend may still arrive
        RankFacts(1, WAITING, Call("all_reduce", "0", 1)),
        RankFacts(1, RUNNING),  # a live wait not yet settled reads so
        RankFacts(1, ENDED),
        RankFacts(1, MISSING),  # what it does is unknown: it may send
    ):
        assert judge.receive_cycle({0: _receiving(0), 1: other}) is None, other
    assert judge.receive_cycle({}) is None
