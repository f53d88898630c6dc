"""The hang judge's evidence model: each source read into the same per-rank facts (facts.py,
analysis/hang/sources/), and the judge's questions of them (who waits for whom, one place)."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.findings import Location
from ddpdoctor.analysis.hang import judge
from ddpdoctor.analysis.hang.facts import ENDED, MISSING, RUNNING, WAITING, Call, RankFacts
from ddpdoctor.analysis.hang.sources import flight, ledger, stacks
from ddpdoctor.analysis.hang.sources.stacks import View
from ddpdoctor.analysis.state import RankState
from ddpdoctor.postmortem import detect, inputs

GLOO = Path(__file__).resolve().parents[3] / "data" / "fr" / "gloo"


def _waits(r: int, group: str, seq: int, done: dict[str, int]) -> RankFacts:
    return RankFacts(r, WAITING, Call("all_reduce", group, seq), done)


def test_a_member_that_issued_less_is_waited_for_and_a_member_without_records_too() -> None:
    facts = {
        0: _waits(0, "0", 5, {"0": 5}),
        1: RankFacts(1, RUNNING, issued={"0": 4}),  # behind: issued #4 only
        2: _waits(2, "0", 5, {"0": 5}),
        3: RankFacts(3, MISSING),
    }
    # by default a group's members are the ranks that issued on it: rank 3 left nothing, so it is no member
    assert judge.waits_graph(facts) == ({0: {1}, 2: {1}}, set())
    # a group whose members the records name (pg_config, the default group): rank 3 is waited for too
    assert judge.waits_graph(facts, lambda g: {0, 1, 2, 3}) == ({0: {1, 3}, 2: {1, 3}}, set())
    assert judge.chain_ends(*judge.waits_graph(facts, lambda g: {0, 1, 2, 3})) == [1, 3]


def test_a_wait_the_facts_cannot_resolve_is_unknown_never_a_wait_for_nobody() -> None:
    facts = {
        0: RankFacts(0, WAITING, Call("<ddp all-reduce>")),  # no group, no position
        1: RankFacts(1, WAITING, None),  # a source that cannot say which call
        2: _waits(2, "side", 3, {"side": 3}),  # nobody else is known in its group
        3: RankFacts(3, ENDED, issued={"0": 7}),
    }
    assert judge.waits_graph(facts) == ({}, {0, 1, 2})


def test_a_p2p_op_waits_for_its_peer_unless_the_peer_waits_in_the_matching_op() -> None:
    send = Call("send 0->1", "0", p2p=True, peer=("send", 1))
    recv = Call("recv 1<-0", "0", p2p=True, peer=("recv", 0))
    matched = {
        0: RankFacts(0, WAITING, send, open_p2p={"0": send}),
        1: RankFacts(1, WAITING, recv, open_p2p={"0": recv}),
    }
    assert judge.waits_graph(matched) == ({0: set(), 1: set()}, set())
    # the peer waits in a send of its own (both send first): each waits for the other, a cycle
    other = Call("send 1->0", "0", p2p=True, peer=("send", 0))
    crossed = {
        0: RankFacts(0, WAITING, send, open_p2p={"0": send}),
        1: RankFacts(1, WAITING, other, open_p2p={"0": other}),
    }
    assert judge.waits_graph(crossed) == ({0: {1}, 1: {0}}, set())
    assert judge.chain_ends(*judge.waits_graph(crossed)) == []
    # the peer left no records: it is the one waited for; a peer outside the records, or none named: unknown
    assert judge.waits_graph({0: matched[0], 1: RankFacts(1, MISSING)}) == ({0: {1}}, set())
    assert judge.waits_graph({0: matched[0]}) == ({}, {0})
    nameless = Call("send", "0", p2p=True)
    assert judge.waits_graph({0: RankFacts(0, WAITING, nameless), 1: RankFacts(1, RUNNING)}) == ({}, {0})


def test_one_place_is_every_rank_waiting_in_one_call() -> None:
    a = [_waits(0, "0", 5, {}), _waits(1, "0", 5, {})]
    assert judge.one_place(a)
    assert not judge.one_place([*a, _waits(2, "0", 6, {})])  # another position
    assert not judge.one_place([*a, _waits(2, "1", 5, {})])  # another group
    assert not judge.one_place([*a, RankFacts(2, RUNNING)])
    assert not judge.one_place([*a, RankFacts(2, ENDED)])
    assert not judge.one_place([])
    # the stacks name no position: the op and the innermost line
    here = [RankFacts(r, WAITING, Call("barrier", sites=(("t.py", 9),))) for r in (0, 1)]
    assert judge.one_place(here)
    assert not judge.one_place([*here, RankFacts(2, WAITING, Call("barrier", sites=(("t.py", 12),)))])


def test_the_ledger_the_dumps_and_the_stacks_of_one_hang_give_the_same_facts_and_the_same_suspect() -> None:
    """The `busy` hang (tests/frjobs/frjob.py): rank 0 waits in all_reduce #4 of the default group while
    rank 1 computes with #3 issued. Its real gloo dumps, the rank states the ledger gives of that shape and
    the stacks attach reads of it are read into facts of one form: rank 0 waits, rank 1 runs; the dumps and
    the ledger (which count positions) both end the chain at rank 1. The stacks hold no position: their wait
    is unknown, and rank 1 is named by where it runs (attach's own rule)."""
    inp = inputs.load([str(GLOO / "busy")])
    world, _ = detect.expected_ranks(inp)
    done = flight.completed_anywhere(list(inp.dumps.values()))
    from_dumps = flight.facts(inp, {r: flight.stand(d, done) for r, d in inp.dumps.items()}, [])
    site = from_dumps[0].pending.sites[0] if from_dumps[0].pending else None
    assert site is not None
    pending = {"op": "all_reduce", "group": "0", "seq": 4, "site": [site[0], site[1], "main"]}
    states = {
        0: RankState(0, "waiting", pending=pending, seq={"0": 3}),
        1: RankState(1, "busy", where=Location(1, site[0], 40, "main", ""), seq={"0": 3}),
    }
    from_ledger = ledger.facts(states)
    views = {
        0: View(0, "collective", "all_reduce", Location(0, site[0], site[1], "main", ""), False, True),
        1: View(1, "elsewhere", None, Location(1, site[0], 40, "main", ""), False, False),
    }
    from_stacks = stacks.facts(views)
    for facts in (from_dumps, from_ledger, from_stacks):
        assert {r: f.state for r, f in facts.items()} == {0: WAITING, 1: RUNNING}
        assert facts[0].pending is not None and facts[0].pending.op == "all_reduce"
        assert facts[0].pending.sites[:1] == (site,)
    for facts in (from_dumps, from_ledger):
        assert facts[0].pending is not None and (facts[0].pending.group, facts[0].pending.seq) == ("0", 4)
        assert facts[1].issued["0"] == 3
    members = lambda g: flight.members(inp, g, world)  # noqa: E731
    assert judge.chain_ends(*judge.waits_graph(from_dumps, members)) == [1]
    assert judge.chain_ends(*judge.waits_graph(from_ledger)) == [1]
    assert judge.waits_graph(from_stacks) == ({}, {0})
