"""The registry of detectors and ``diagnose(record, config) -> Report``. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Callable

from ddpdoctor.analysis import check, cost, ending, evidence, figures, hang, memleak, profile, selfcheck, wellformed
from ddpdoctor.analysis.catalog import VERDICT_RANK, entry, selected
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, RankLine, Report, Verdict, severity_rank
from ddpdoctor.analysis.hang import multinode, restarts
from ddpdoctor.analysis.ids import DATA_UNEVEN_BATCHES, HANG_UNEVEN_BATCHES
from ddpdoctor.analysis.state import all_states, complete_errors, is_transport_error, steps_of
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
    # elastic restarts: each earlier attempt judged on its own records, as a run of its own (record/attempts.py)
    earlier = [diagnose(dataclasses.replace(a, attempts=()), config, command) for a in record.attempts]
    record, damaged = wellformed.screen(record)  # damaged records set aside, each file's said in one line
    record = complete_errors(record)  # a new record: diagnose never changes its input
    record = evidence.harmonized(record)  # a rank without a flight record: the others' torch-made calls set aside
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
    if HANG_UNEVEN_BATCHES in ids:
        findings = [f for f in findings if f.id != DATA_UNEVEN_BATCHES]
    if earlier:
        findings += restarts.restarted(record, earlier, verdict_of(findings)[0])
    report = conclude(
        findings,
        config,
        command=command or str(record.manifest.get("command", "analyze")),
        run_dir=record.run_dir,
        ranks=rank_lines(record, config),
        notes=tuple(damaged)
        + incomplete(record)
        + tuple(restarts.ended_not_restarted(record))
        + evidence.recorder_notes(record),
        figures=figures.compute(record),
        cost=cost.compute(record),
    )
    if not earlier:
        return report
    lines = [restarts.attempt_line(a.attempt, r) for a, r in zip(record.attempts, earlier)]
    return dataclasses.replace(report, attempts=(*lines, restarts.attempt_line(record.attempt, report)))


def conclude(
    findings: list[Finding],
    config: Config,
    *,
    command: str,
    run_dir: str,
    ranks: Sequence[RankLine] = (),
    notes: Sequence[str] = (),
    figures: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
) -> Report:
    """The one way from findings to a Report, for a run directory (``diagnose``) and a post-mortem of torch's
    own records alike: the most severe first, ``--select``/``--ignore`` (and the note that says what they left
    out), the verdict and exit code by the catalog (``verdict_of``)."""
    found = sorted(findings, key=lambda f: severity_rank(f.severity))
    found, left = pick(found, config)
    verdict, code = verdict_of(found, config.fail_on)
    return Report(
        command=command,
        verdict=verdict,
        exit_code=code,
        run_dir=run_dir,
        findings=tuple(found),
        ranks=tuple(ranks),
        summary=_summary(verdict, found),
        notes=(*notes, *left),
        figures=figures or {},
        cost=cost or {},
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
    errors = []
    for f in findings:
        if f.severity == "error":
            e = entry(f.id)
            # the one fact of the evidence an id's verdict depends on: ranks that wait for its culprits
            errors.append(e.waited if e.waited and f.evidence.get("waiting") else (e.verdict, e.exit_code))
    if errors:
        top = min(VERDICT_RANK[v] for v, _c in errors)
        first = [(v, c) for v, c in errors if VERDICT_RANK[v] == top]
        return first[0][0], min(c for _v, c in first)
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
        # training steps (rank/steps.py), and DDP's forwards where they say more (accumulation, several
        # forwards a step, a job whose steps are not DDP's): what an uneven-inputs deadlock counts
        n = steps_of(record.ranks[r])
        fwd = f", {st.ddp_fwd} DDP forwards" if st.ddp_fwd and st.ddp_fwd != n else ""
        out.append(RankLine(r, st.state, f"{detail}; {n} steps{fwd}", st.where))
    return out


def _summary(verdict: str, findings: list[Finding]) -> str:
    if not findings:
        return "healthy: no findings"
    return findings[0].message
