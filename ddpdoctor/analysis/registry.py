"""The registry of detectors and ``diagnose(record, config) -> Report``. Pure."""

from __future__ import annotations

from typing import Callable

from ddpdoctor.analysis import check, cost, ending, figures, hang, memleak, profile, selfcheck
from ddpdoctor.analysis.catalog import VERDICT_RANK, entry, selected
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, RankLine, Report, Verdict, severity_rank
from ddpdoctor.analysis.hang import multinode
from ddpdoctor.analysis.state import all_states, complete_errors, is_transport_error
from ddpdoctor.errors import ExitCode
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

Detector = Callable[[RunRecord, Config], "list[Finding]"]

# family -> its detector (the same keys as commands.COMMANDS, rank.hooks.REGISTRY and render.html.SECTIONS);
# each is pure and sees the whole record. "probe" is ddpdoctor's own health, not a command's.
REGISTRY: dict[str, Detector] = {
    "hang": hang.detect,  # every command: startup, crashes, hangs, shape mismatches, teardown, attach
    "check": check.detect,
    "memleak": memleak.detect,
    "profile": profile.detect,
    "probe": selfcheck.detect,  # ddpdoctor's own probes that failed inside a rank
}


def diagnose(record: RunRecord, config: Config, command: str | None = None) -> Report:
    """Run every detector on the record, apply the verdict invariant and pick the exit code."""
    record = complete_errors(record)  # a new record: diagnose never changes its input
    findings: list[Finding] = []
    for det in REGISTRY.values():
        findings += det(record, config)
    if any(f.id.startswith("run.") for f in findings):
        # the job never became distributed: crash/hang findings would only repeat it
        findings = [f for f in findings if f.id.startswith(("run.", "teardown."))]
    # the invariant: a rank that ended abnormally never leaves the verdict at OK
    findings += ending.unexplained(record, findings)
    findings += ending.partial_view(record, findings)
    findings = multinode.adjust(record, findings)  # a lost node's victims; each culprit's node
    ids = {f.id for f in findings}
    if "hang.uneven-batches" in ids:
        findings = [f for f in findings if f.id != "data.uneven-batches"]
    findings.sort(key=lambda f: severity_rank(f.severity))
    findings, notes = pick(findings, config)
    notes = incomplete(record) + notes
    verdict, code = verdict_of(findings, config.fail_on)
    return Report(
        command=command or str(record.manifest.get("command", "analyze")),
        verdict=verdict,
        exit_code=code,
        run_dir=record.run_dir,
        findings=tuple(findings),
        ranks=tuple(rank_lines(record, config)),
        summary=_summary(verdict, findings),
        notes=notes,
        figures=figures.compute(record),
        cost=cost.compute(record),
    )


def pick(findings: list[Finding], config: Config) -> tuple[list[Finding], tuple[str, ...]]:
    """The findings ``--select``/``--ignore`` keep, and the note that says what they left out (the verdict and
    exit code are the kept findings')."""
    if not config.select and not config.ignore:
        return findings, ()
    kept = [f for f in findings if selected(f.id, config.select, config.ignore)]
    left = sorted({f.id for f in findings} - {f.id for f in kept})
    note = (f"left out by --select/--ignore: {', '.join(left)}",) if left else ()
    return kept, note


def incomplete(record: RunRecord) -> tuple[str, ...]:
    """The note that names the files whose last line is cut: what they held last is not in the judgement."""
    from ddpdoctor.analysis.hang.damage import monitor_lost

    out = []
    lost = monitor_lost(record)
    if lost and schema.MONITOR not in record.cut:
        out.append(f"records incomplete: {lost}; the ranks' own records are judged")
    if record.cut:
        one = len(record.cut) == 1
        out.append(
            f"records incomplete: {', '.join(record.cut)} {'ends' if one else 'end'} in a cut line (a process "
            f"killed in the middle of a write, or the file cut after the run); the rest of {'it' if one else 'each'} "
            "is judged"
        )
    return tuple(out)


def verdict_of(findings: list[Finding], fail_on: str = "error") -> tuple[Verdict, int]:
    """The report's verdict and exit code, from the catalog entries of its error findings: the verdict that
    ranks first (could not run, hang, crash, findings) and, among those, the lowest exit code (a script that
    is not distributed at all is bad input, 2, before could not run, 4). No error: OK, exit 0, or 1 where a
    finding is at least as severe as ``fail_on``."""
    errors = [entry(f.id) for f in findings if f.severity == "error"]
    if errors:
        top = min(VERDICT_RANK[e.verdict] for e in errors)
        first = [e for e in errors if VERDICT_RANK[e.verdict] == top]
        return first[0].verdict, min(e.exit_code for e in first)
    failing = fail_on != "error" and any(severity_rank(f.severity) <= severity_rank(fail_on) for f in findings)
    return "ok", ExitCode.FINDINGS if failing else ExitCode.OK


def rank_lines(record: RunRecord, config: Config) -> list[RankLine]:
    """One line per rank for the report: its state (waiting in which collective, finished, crashed...)."""
    verdict = record.monitor_event(schema.K_VERDICT)
    now = float(verdict["t"]) if verdict else record.latest_t()
    out = []
    for r, st in all_states(record, now, config).items():
        if st.state == "waiting":
            p = st.pending or {}
            detail = f"waiting in {p.get('op')} (#{p.get('seq')}) for {now - (st.since or now):.1f} s"
        elif st.state == "ddp-wait":
            detail = "inside DDP backward/forward (its all-reduce)"
        elif st.state == "finished":
            detail = f"finished (exit code {st.exit_code})"
        elif st.state == "crashed":
            err = record.ranks[r].error or {}
            # a transport error is what a rank gets when a peer went away: a consequence, not its failure
            detail = (
                f"lost a peer ({err.get('type', '?')}: transport error, a victim)"
                if is_transport_error(err)
                else f"raised {err.get('type', '?')}"
            )
        else:
            detail = st.state
        out.append(RankLine(r, st.state, f"{detail}; {st.ddp_fwd} DDP steps", st.where))
    return out


def _summary(verdict: str, findings: list[Finding]) -> str:
    if not findings:
        return "healthy: no findings"
    return findings[0].message
