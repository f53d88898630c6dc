"""The one policy (analysis/hang/policy.py): one ordered list of questions that every source's case is asked,
each question skipped where the case's evidence cannot tell what it needs; the verdict does not depend on
the order in which the ranks' records come; and a run whose only sign of the parting is the ranks' pending
calls (a rank's flight record lost at the kill: tests/golden/fsdp2_flight_lost, a real FSDP2 run of
tests/scripts/fsdp2_faults.py --fault skip) reads as the divergence it is, never as a timeout."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

import pytest

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import policy
from ddpdoctor.analysis.hang.attach import StackCase
from ddpdoctor.analysis.hang.deadlock import LedgerCase
from ddpdoctor.analysis.hang.dumps import DumpCase
from ddpdoctor.analysis.live import LiveCase
from ddpdoctor.postmortem import inputs, report
from ddpdoctor.record.reader import load_run

TESTS = Path(__file__).resolve().parents[3]
GOLDEN = TESTS / "golden"
GLOO = TESTS / "data" / "fr" / "gloo"
CASES = (DumpCase, LedgerCase, StackCase, LiveCase)


def test_every_rule_is_a_question_of_the_case_and_named_once():
    names = [r.name for r in policy.RULES]
    assert len(names) == len(set(names))
    questions = {r.question for r in policy.RULES}
    for r in policy.RULES:
        assert callable(getattr(policy.Case, r.question)), r
        assert policy.Case.__dict__[r.question](policy.Case()) is None  # the base answers nothing
    for case in CASES:
        # a source answers the policy's questions and no others: it has no decision of its own
        own = {n for n, v in vars(case).items() if callable(v) and not n.startswith("_")} - {"read", "finish", "lend"}
        assert own <= questions, (case.__name__, own - questions)
        assert case.source in policy.SOURCES


def test_a_rule_the_evidence_cannot_tell_is_never_asked():
    class Asked(policy.Case):
        can = frozenset({policy.MOVES})

        def __init__(self) -> None:
            self.seen: list[str] = []

        def __getattribute__(self, name: str):  # every question it is asked, in order
            if name in {r.question for r in policy.RULES}:
                object.__getattribute__(self, "seen").append(name)
            return object.__getattribute__(self, name)

    c = Asked()
    assert policy.judge(c) == []
    assert c.seen == [r.question for r in policy.RULES if r.needs <= {policy.MOVES}]
    assert "extra_call" not in c.seen and "all_moved" in c.seen  # stacks hold no positions


def test_lost_flight_record_still_reads_as_the_divergence_at_the_pending_calls(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(GOLDEN / "fsdp2_flight_lost", run)
    rep = diagnose(load_run(str(run)), Config(timeout=40.0))
    assert (rep.verdict, rep.exit_code) == ("hang", 3)
    (f,) = [f for f in rep.findings if f.severity == "error"]
    assert f.id == "hang.divergent-collective", f.message  # never hang.timeout: the live proof said certain
    assert f.evidence["divergence"]["seq"] == 50 and f.evidence["divergence"]["group"] == "0"
    assert "all_gather(136)" in f.message and "all_reduce(272)" in f.message


def _key(findings) -> list[tuple]:
    return [
        (f.id, f.severity, tuple(f.culprits), tuple(sorted({(l.rank, l.line) for l in f.locations}))) for f in findings
    ]


@pytest.mark.parametrize("case", sorted(p for p in GLOO.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_the_dumps_verdict_does_not_depend_on_the_order_of_the_ranks(case):
    inp = inputs.load([str(case)])
    parts = inputs.jobs(inp)
    for part in parts:
        want = _key(report.build(part, Config()).findings)
        ranks = list(part.dumps)
        for seed in range(3):
            random.Random(seed).shuffle(ranks)
            shuffled = dataclasses.replace(part, dumps={r: part.dumps[r] for r in ranks})
            assert _key(report.build(shuffled, Config()).findings) == want, (case.name, ranks)


@pytest.mark.parametrize(
    "name", ["rank_conditional", "cross_group", "mesh_tp_extra", "mesh_dp_skip", "fsdp2_flight_lost"]
)
def test_the_run_directorys_verdict_does_not_depend_on_the_order_of_the_ranks(name):
    record = load_run(str(GOLDEN / name))
    cfg = Config(timeout=60.0)
    want = _key(diagnose(record, cfg).findings)
    ranks = list(record.ranks)
    for seed in range(3):
        random.Random(seed).shuffle(ranks)
        shuffled = dataclasses.replace(record, ranks={r: record.ranks[r] for r in ranks})
        assert _key(diagnose(shuffled, cfg).findings) == want, (name, ranks)
