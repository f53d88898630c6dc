"""The registry of detectors and ``diagnose(record, config) -> Report``. Pure."""

from __future__ import annotations

from typing import Callable

from ddpdoctor.analysis import (attach, checkpoint, collective, crash, digest, data, drift, ending, figures, hang, memory, perf,
                                profile, run, selfcheck, teardown)
from ddpdoctor.analysis import multinode
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import ExitCode, Finding, RankLine, Report
from ddpdoctor.analysis.state import all_states, complete_errors
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

Detector = Callable[[RunRecord, Config], "list[Finding]"]

# One entry per fault family; each is pure and sees the whole record.
REGISTRY: dict[str, Detector] = {
    "run": run.detect,
    "crash": crash.detect,
    "hang": lambda r, c: digest.annotate(hang.detect(r, c), r),   # + sequences that differed before the ring
    "collective": collective.detect,   # a run that went on past a collective with mismatched shapes
    "teardown": teardown.detect,
    "data": data.detect,
    "drift": drift.detect,
    "checkpoint": checkpoint.detect,
    "perf": perf.detect,
    "memleak": memory.detect,
    "profile": profile.detect,
    "attach": attach.detect,   # `ddpdoctor attach`: a hang from py-spy stacks alone
    "probe": selfcheck.detect,   # ddpdoctor's own probes that failed inside a rank
    "multinode": multinode.detect,   # a node the job store saw disappear
}

_ORDER = {"error": 0, "warning": 1, "note": 2}


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
    findings = multinode.adjust(record, findings)   # a lost node's victims; each culprit's node
    ids = {f.id for f in findings}
    if "hang.uneven-batches" in ids:
        findings = [f for f in findings if f.id != "data.uneven-batches"]
    findings.sort(key=lambda f: _ORDER.get(f.severity, 3))
    errors = [f for f in findings if f.severity == "error"]
    fam = {f.id.split(".", 1)[0] for f in errors}
    if "run" in fam:
        verdict = "error"
        code = ExitCode.USAGE if any(f.id == "run.no-distributed" for f in errors) else ExitCode.NOT_RUN
    elif "hang" in fam:
        verdict, code = "hang", ExitCode.HANG
    elif "crash" in fam:
        verdict, code = "crash", ExitCode.FINDINGS
    elif errors:
        verdict, code = "findings", ExitCode.FINDINGS
    else:
        verdict, code = "ok", ExitCode.OK
        if config.fail_on in ("warning", "note") and any(
                _ORDER[f.severity] <= _ORDER[config.fail_on] for f in findings):
            code = ExitCode.FINDINGS
    return Report(command=command or str(record.manifest.get("command", "analyze")), verdict=verdict,
                  exit_code=code, run_dir=record.run_dir, findings=tuple(findings),
                  ranks=tuple(rank_lines(record, config)), summary=_summary(verdict, findings),
                  figures=figures.compute(record))


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
            detail = f"raised {err.get('type', '?')}"
        else:
            detail = st.state
        out.append(RankLine(r, st.state, f"{detail}; {st.ddp_fwd} DDP steps", st.where))
    return out


def _summary(verdict: str, findings: list[Finding]) -> str:
    if not findings:
        return "healthy: no findings"
    return findings[0].message
