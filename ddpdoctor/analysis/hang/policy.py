"""The one policy of the hang judge: one ordered list of questions (``RULES``) that picks the finding and its
culprits, whichever source the evidence came from. Pure.

Every source is first read into a ``Case`` (the ledger's rank states: analysis/hang/deadlock.py; torch's
flight-recorder dumps: analysis/hang/dumps.py; the stacks ``ddpdoctor attach`` took: analysis/hang/attach.py).
A case says what its evidence can tell (``can``: positions, lines, histories, DDP steps, how ranks ended, ...)
and answers the questions it has the records for; a question it cannot answer is ``None``. The policy asks
the rules in their one order and keeps the first answer: a rule whose ``needs`` the case cannot tell is skipped
without being asked, so no source judges with evidence it lacks, and no source has an order of its own.

The order is the order of the evidence's strength: a record that a rank's call sits under a rank test, or that
a rank left the loop, outranks the calls' positions; a call that is one rank's own (an insertion, a line no
other rank reaches) outranks a mismatch of shapes; a mismatch at a position outranks a rank behind; the
ranks' orders across groups (a device mesh's tp and dp) come after every group's own walk; and a wait that
no record explains is a timeout, last.

What must agree across ranks for two calls to be one is ``facts.agreement`` (the op, and a shaped collective's
shapes and dtypes); the dumps add what only they record (a coalesced group's every entry, the outputs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.hang.facts import RankFacts

# What a case's evidence can tell.
POSITIONS: Final = "positions"  # each call's group and position in the group's sequence (ledger, dumps)
HISTORY: Final = "history"  # each rank's earlier calls, in order (ledger, dumps)
LINES: Final = "lines"  # the user's line of the call a rank waits in (ledger, stacks; pickle dumps' frames)
STEPS: Final = "steps"  # DDP's forward passes and the DataLoader's length per rank (ledger)
ENDINGS: Final = "endings"  # which ranks finished or left (ledger's finish events; processes gone before attach)
FAILURES: Final = "failures"  # torchrun's error files, failure summaries and logs: who failed first
MOVES: Final = "moves"  # two looks some time apart: whether each rank moved (stacks)
NOW: Final = "now"  # a look at a running job: how long each rank has waited (the monitor's live case)
STOPPED: Final = "stopped"  # the monitor stopped the run on a verdict (a live run: ``verdict`` in monitor.jsonl)

SOURCES: Final = ("ledger", "dumps", "stacks", "live")


class Case:
    """One judgement's evidence: its source, what it can tell, the per-rank facts, and the answers its
    records give. Each question returns a finding, or None where the records say nothing of it (this base
    answers none); a source overrides the questions it can answer."""

    source: str = ""
    can: frozenset[str] = frozenset()
    facts: Mapping[int, RankFacts] = {}

    def finish(self, f: Finding) -> Finding:
        """The finding as the source reports it (the dumps name the ranks that left no dump)."""
        return f

    def lend(self, f: Finding) -> Finding:
        """Another source's finding of the same job with what only this source knows added (the stacks'
        lines where the dumps hold none; the dumps' groups and positions where the stacks hold none)."""
        return f

    # the questions, in the policy's order (RULES)
    def alone(self) -> Finding | None:
        """One rank's records and nothing that names the others."""
        return None

    def teardown(self) -> Finding | None:
        """A rank waits in its first call on a group the others never made, and torchrun ended the others."""
        return None

    def waited_for_no_record(self) -> Finding | None:
        """Every waiting rank waits for ranks that left no record."""
        return None

    def rank_test(self) -> Finding | None:
        """The ranks still waiting reached their call under a rank test the others never took."""
        return None

    def left_early(self) -> Finding | None:
        """Some ranks left the loop (or returned from the call) the others are still in."""
        return None

    def out_of_batches(self) -> Finding | None:
        """A rank out of batches met the others' DDP all-reduce with its end-of-epoch collective."""
        return None

    def extra_call(self) -> Finding | None:
        """One rank's call is an extra one: the calls after it are the others' shifted by one."""
        return None

    def own_line(self) -> Finding | None:
        """At the first parting, the odd ranks' line is one no other rank ever reaches."""
        return None

    def shape(self) -> Finding | None:
        """The ranks met in one call with different shapes or dtypes."""
        return None

    def uneven(self) -> Finding | None:
        """The ranks' DataLoaders have different lengths."""
        return None

    def exited(self) -> Finding | None:
        """A rank that ended never issued the call the others wait in."""
        return None

    def differ(self) -> Finding | None:
        """The ranks' calls differ at a position and no rule above names why."""
        return None

    def uneven_steps(self) -> Finding | None:
        """The ranks ran different numbers of DDP steps."""
        return None

    def finished_early(self) -> Finding | None:
        """A rank finished while the others still needed it."""
        return None

    def behind(self) -> Finding | None:
        """The ranks at the ends of the wait chains: behind, without records, or stuck inside a call."""
        return None

    def program(self) -> Finding | None:
        """The ranks' orders of calls across every group: one rank made one call more or fewer."""
        return None

    def receive_cycle(self) -> Finding | None:
        """Every rank waits to receive and none sends."""
        return None

    def own_routine(self) -> Finding | None:
        """Ranks whose programs differ by role (pipeline stages): the one rank whose step left out a call its
        own earlier steps made, or made one call more than they did."""
        return None

    def all_moved(self) -> Finding | None:
        """Every rank moved between two looks: no hang seen."""
        return None

    def elsewhere(self) -> Finding | None:
        """Some ranks wait in a call while others sit outside any."""
        return None

    def none_waiting(self) -> Finding | None:
        """No rank is inside a call and none moved."""
        return None

    def one_place(self) -> Finding | None:
        """Every rank waits in one and the same call."""
        return None

    def different_calls(self) -> Finding | None:
        """The ranks wait in different calls."""
        return None

    def pending_calls_differ(self) -> Finding | None:
        """Waiting ranks' pending calls sit at one position and differ: they can never meet (the evidence
        when a rank's history is lost and only its position and pending call remain)."""
        return None

    def overdue(self) -> Finding | None:
        """A running job's wait, or its lack of progress, has lasted past ``--timeout``."""
        return None

    def timeout(self) -> Finding | None:
        """The monitor stopped a wait that nothing above explains."""
        return None

    def no_record(self) -> Finding | None:
        """Ranks that left no record, with nothing pending elsewhere: never OK for want of evidence."""
        return None

    def empty_records(self) -> Finding | None:
        """Ranks whose record holds no call while others recorded some."""
        return None


@dataclass(frozen=True)
class Rule:
    """One question of the policy: its name, what the evidence must tell for it to be asked, and the
    question (a ``Case`` method)."""

    name: str
    needs: frozenset[str]
    question: str  # the ``Case`` method that asks it

    def ask(self, case: Case) -> Finding | None:
        """The case's answer to this question (a source that cannot answer it gives None)."""
        got: Callable[[], Finding | None] = getattr(case, self.question)
        return got()


def _rule(name: str, needs: set[str], question: Callable[[Case], Finding | None]) -> Rule:
    return Rule(name, frozenset(needs), question.__name__)


RULES: Final[tuple[Rule, ...]] = (
    _rule("alone", set(), Case.alone),
    _rule("teardown", {FAILURES, POSITIONS}, Case.teardown),
    _rule("waited-for-no-record", {POSITIONS}, Case.waited_for_no_record),
    _rule("rank-test", {LINES, ENDINGS}, Case.rank_test),
    _rule("left-early", {LINES, ENDINGS}, Case.left_early),
    _rule("out-of-batches", {STEPS, POSITIONS}, Case.out_of_batches),
    _rule("extra-call", {POSITIONS, HISTORY}, Case.extra_call),
    _rule("own-line", {POSITIONS, HISTORY, LINES}, Case.own_line),
    _rule("shape", {POSITIONS}, Case.shape),
    _rule("uneven", {STEPS}, Case.uneven),
    _rule("exited", {ENDINGS}, Case.exited),
    _rule("differ", {POSITIONS, HISTORY}, Case.differ),
    _rule("uneven-steps", {STEPS}, Case.uneven_steps),
    _rule("finished-early", {ENDINGS}, Case.finished_early),
    # before `behind`: a stage that skipped its send starves the next one, which reads as behind
    _rule("own-routine", {HISTORY}, Case.own_routine),
    _rule("behind", {POSITIONS}, Case.behind),
    _rule("program", {POSITIONS, HISTORY}, Case.program),
    _rule("receive-cycle", set(), Case.receive_cycle),
    _rule("all-moved", {MOVES}, Case.all_moved),
    _rule("elsewhere", {MOVES}, Case.elsewhere),
    _rule("none-waiting", {MOVES}, Case.none_waiting),
    _rule("one-place", set(), Case.one_place),
    _rule("different-calls", set(), Case.different_calls),
    _rule("pending-calls-differ", {POSITIONS, STOPPED}, Case.pending_calls_differ),
    _rule("overdue", {NOW}, Case.overdue),
    _rule("timeout", {STOPPED}, Case.timeout),
    _rule("no-record", set(), Case.no_record),
    _rule("empty-records", {HISTORY}, Case.empty_records),
)


def judge(case: Case, *more: Case) -> list[Finding]:
    """The first answer of the rules the cases' evidence can be asked, as its source reports it, with what the
    other cases of the same job know added (``lend``); [] when no rule answers. Several cases (the dumps and
    the stacks ``attach`` took of one job) are one evidence: each rule is asked of every case that can tell
    what it needs, in the order given, before the next rule is, so the strongest evidence of either source
    decides and no source's report is weighed against another's afterwards."""
    cases = (case, *more)
    for rule in RULES:
        for i, c in enumerate(cases):
            if not rule.needs <= c.can:
                continue
            f = rule.ask(c)
            if f is None:
                continue
            f = c.finish(f)
            for other in cases[:i] + cases[i + 1 :]:
                f = other.lend(f)
            return [f]
    return []


def asked(case: Case) -> list[str]:
    """The names of the rules this case's evidence can be asked, in order (what the evidence allows)."""
    return [r.name for r in RULES if r.needs <= case.can]
