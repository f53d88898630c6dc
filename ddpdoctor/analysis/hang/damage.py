"""A run directory whose records are damaged: a rank's folder deleted, its files cut. Pure.

What is left must not be read as something that happened: a rank without records on a one-node run did
run here (it is not "on another node"); a rank whose events have no init but whose heartbeats count DDP
steps did initialise (its events file is cut: not a failure before init); a rank without a finish event in
a job whose launcher exited 0 finished (not "killed"). This module names such ranks
(``rundir.records-missing``) and tells the other detectors which records not to trust.
"""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.analysis.ids import RUNDIR_RECORDS_MISSING
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RankRecord, RunRecord

HINT = (
    "The run directory was changed after the run: restore the missing or cut files (monitor.jsonl, "
    "ranks/<r>/events.jsonl, heartbeat.jsonl, ledger.jsonl), or re-run the job; ddpdoctor judges only what the records hold and names "
    "the ranks whose records are gone."
)


def one_node(record: RunRecord) -> bool:
    """Every rank of the job ran under this run directory's launcher: torchrun --standalone or --nnodes 1,
    or spawn (one process tree)."""
    mode = record.manifest.get("mode")
    if mode == "spawn":
        return True
    if mode != "torchrun":
        return False
    args = [str(a) for a in record.manifest.get("torchrun_args") or []]
    if "--standalone" in args:
        return True
    for i, a in enumerate(args):
        value = (
            a.split("=", 1)[1]
            if a.startswith("--nnodes=")
            else (args[i + 1] if a == "--nnodes" and i + 1 < len(args) else None)
        )
        if value is not None:
            return value.split(":")[-1] == "1"
    return False


def _progressed(record: RunRecord, r: int) -> int:
    """How many DDP steps or collectives the rank's other files show (0: none)."""
    rec = record.ranks[r]
    hb = rec.last_hb or {}
    return max(int(hb.get("step") or 0), int(rec.counters.get("ddp_fwd") or 0), len(rec.ledger))


def cut_init(record: RunRecord) -> list[int]:
    """Ranks with no init event whose heartbeats, counters or ledger show they ran: events.jsonl is cut."""
    return sorted(r for r, rec in record.ranks.items() if rec.event(schema.K_INIT) is None and _progressed(record, r))


def exited_cleanly(record: RunRecord) -> bool:
    """The launcher (torchrun, spawn) exited 0 and nothing ended the run from outside: every rank exited 0."""
    ex = record.monitor_event(schema.K_EXIT)
    return bool(ex and ex.get("returncode") == 0 and record.monitor_event(schema.K_KILL) is None)


def cut_finish(record: RunRecord) -> list[int]:
    """Ranks without a finish event, without an error, in a job whose launcher exited 0: the finish was cut."""
    if not exited_cleanly(record):
        return []
    return sorted(r for r, rec in record.ranks.items() if rec.event(schema.K_FINISH) is None and not rec.error)


def _empty(rec: RankRecord) -> bool:
    """The rank's folder is there but holds no record at all (its files deleted)."""
    return not (rec.events or rec.last_hb or rec.ledger or rec.error or rec.counters or rec.stacks or rec.fatal)


def missing_ranks(record: RunRecord) -> list[int]:
    """Ranks of a one-node run that have no records here at all (``ranks/<r>`` deleted, emptied or never
    written)."""
    if not one_node(record) or not record.ranks:
        return []
    world = max(record.world_size or 0, max(record.ranks) + 1)
    return [r for r in range(world) if r not in record.ranks or _empty(record.ranks[r])]


def monitor_lost(record: RunRecord) -> str | None:
    """What is wrong with ``monitor.jsonl`` (ddpdoctor's own log of the run: the launch, the live verdict,
    the kill, the launcher's exit code), or None. Without it the ranks' records are all there is: a hang
    cannot be told from a run cut short, so nothing may read as OK for want of it. Runs that ``attach`` made
    have no monitor."""
    if record.manifest.get("command") == "attach" or "monitor_pid" not in record.manifest:
        return None
    if record.monitor_event(schema.K_EXIT) is not None:
        return None
    if schema.MONITOR in record.cut:
        return f"{schema.MONITOR} is cut (its last records, how the run ended, are gone)"
    if not record.monitor:
        return f"{schema.MONITOR} is absent or empty"
    return None


def all_finished(record: RunRecord) -> bool:
    """Every rank of the job wrote its finish event with exit code 0 and no error: its own records say how
    it ended, whatever happened to the monitor's log."""
    world = max(record.world_size or 0, max(record.ranks, default=-1) + 1)
    if not world or len(record.ranks) < world:
        return False
    for rec in record.ranks.values():
        fin = rec.event(schema.K_FINISH)
        if rec.error or fin is None or fin.get("exception") or fin.get("code") not in (0, None):
            return False
    return True


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """``rundir.records-missing`` for every rank whose records are gone or contradict themselves."""
    missing, no_init, no_finish = missing_ranks(record), cut_init(record), cut_finish(record)
    lost = monitor_lost(record)
    if lost and all_finished(record):
        lost = None  # every rank's own finish event says how it ended: a note (registry.incomplete) says the rest
    parts = []
    if lost:
        parts.append(f"{lost}: how the run ended is unknown, judged from the ranks' records alone")
    if missing:
        how = "is empty" if missing[0] in record.ranks else "is absent"
        parts.append(
            f"{ranks_phrase(missing)} left no records in this run directory (ranks/{missing[0]} {how}) although "
            "the job ran on this one node: what it did is unknown"
        )
    if no_init:
        steps = {r: _progressed(record, r) for r in no_init}
        parts.append(
            f"the events of {ranks_phrase(no_init)} hold no init_process_group although "
            f"{'its' if len(no_init) == 1 else 'their'} other records show {max(steps.values())} DDP steps or "
            "collectives: events.jsonl is cut"
        )
    rest = [r for r in no_finish if r not in no_init]
    if rest:
        parts.append(
            f"{ranks_phrase(rest)} {'has' if len(rest) == 1 else 'have'} no finish event although the launcher "
            "exited 0 (every rank exited 0): events.jsonl is cut"
        )
    if not parts:
        return []
    culprits = tuple(sorted(set(missing) | set(no_init) | set(no_finish)))
    return [
        Finding(
            RUNDIR_RECORDS_MISSING,
            "error",
            "the run directory is damaged: " + "; ".join(parts),
            HINT,
            culprits,
            (),
            {"missing": missing, "cut_init": no_init, "cut_finish": no_finish, "monitor": lost},
            culprits=culprits,
        )
    ]
