"""How each rank ended, and the invariant every verdict keeps: a run where a rank ended abnormally (an
exception, a non-zero exit, a fatal signal, ended from outside before it finished) is never called OK. Pure.

The detectors explain most abnormal ends (a crash and its victims, a divergence gloo aborted); when none
of them did, :func:`unexplained` gives the finding that says so rather than let the verdict read OK.
The one exception is the documented teardown abort of a rank that had finished its work.
"""

from __future__ import annotations

import re

from ddpdoctor.analysis.findings import Finding, analyze_command, group_values, ranks_phrase, unseen_phrase
from ddpdoctor.analysis.ids import CRASH_ABNORMAL_EXIT, LAUNCH_RANK_NOT_ENTERED, MULTINODE_PARTIAL_VIEW
from ddpdoctor.analysis.state import TEARDOWN_ABORT, is_transport_error, loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

# monitor kill reasons that end a healthy run on purpose (the user's --steps/--epochs/--max-time)
_STOP_RULES = ("--steps", "--epochs", "--max-time")


def stopped_on_purpose(record: RunRecord) -> bool:
    """Did the monitor end the run on purpose (--steps/--epochs, a verdict), not a fault?"""
    kill = record.monitor_event(schema.K_KILL)
    return bool(kill and str(kill.get("reason", "")).startswith(_STOP_RULES))


_FAILURE_ROW = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*\n\s*exitcode\s*:\s*(-?\d+)[^\n]*?(?:\((SIG\w+)\))?\s*$", re.M
)


def torchrun_exits(run_dir: str) -> dict[int, str]:
    """Each rank's end as torchrun's failure table in torchrun.log states it ("killed by SIGKILL",
    "exit code 3"): the only witness of a rank killed before it could write a record. Its last 64 KiB."""
    import os

    try:
        with open(os.path.join(run_dir, schema.TORCHRUN_LOG), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return {}
    out = {}
    for m in _FAILURE_ROW.finditer(text):
        rank, code, sig = int(m.group(1)), int(m.group(2)), m.group(3)
        out[rank] = f"killed by {sig}" if sig else f"exit code {code}"
    return out


def how_ended(record: RunRecord, rank: int, exits: dict[int, str] | None = None) -> str | None:
    """None when the rank ended normally (or is still running in a live record); else a short phrase."""
    rec = record.ranks[rank]
    fin = rec.event(schema.K_FINISH)
    err = rec.error
    if err:
        kind = "failed with a transport error" if is_transport_error(err) else "raised"
        # gloo prefixes its messages with a source path: "[/__w/.../pair.cc:553] Connection closed by peer"
        first = re.sub(r"^\[[^\]]*\]\s*", "", (str(err.get("message", "")).strip().splitlines() or [""])[0])
        first = first.split(". ", 1)[0][:120]
        return f"{kind} {err.get('type', '?')}: {first}"
    if fin is not None:
        if fin.get("exception"):
            return "raised an exception"
        code = fin.get("code")
        if code not in (0, None):
            return f"exited with code {code}"
        return None  # finished (a teardown abort after this is teardown.gloo-abort)
    if record.monitor_event(schema.K_EXIT) is None:
        return None  # still running
    from ddpdoctor.analysis.hang.damage import exited_cleanly

    if exited_cleanly(record) and not err:
        return None  # the launcher saw every rank exit 0: the finish event was cut (rundir.records-missing)
    if rec.fatal.strip():
        return f"died of a fatal signal ({rec.fatal.strip().splitlines()[0][:80]})"
    if stopped_on_purpose(record):
        return None
    if rec.terminated.strip():
        return "was ended (SIGTERM) before it finished"
    said = (exits or {}).get(rank)
    return f"ended without finishing ({said})" if said else "ended without finishing (killed)"


def partial_view(record: RunRecord, findings: list[Finding]) -> list[Finding]:
    """A node's run directory holds only its own ranks: say which ranks it could not see, so that an OK
    here is never read as an OK for the job."""
    from ddpdoctor.analysis.hang.damage import missing_ranks

    world = record.world_size or 0
    unseen = [r for r in range(world) if r not in record.ranks]
    if not unseen or not record.ranks or any("not visible here" in f.message for f in findings):
        return []
    if any(f.id == LAUNCH_RANK_NOT_ENTERED for f in findings):
        return []  # this node's launcher ran them, and the probes could not enter them
    if missing_ranks(record):
        return []  # one node: the ranks are not elsewhere, their records are gone (rundir.records-missing)
    return [
        Finding(
            MULTINODE_PARTIAL_VIEW,
            "warning",
            f"this run saw {ranks_phrase(record.ranks)} of {world}; {unseen_phrase(unseen)}",
            "A verdict here covers this node's ranks only. Run ddpdoctor analyze with every node's run "
            f"directory, {analyze_command(record.run_dir)}, for the whole job.",
            tuple(sorted(record.ranks)),
            (),
            {"unseen_ranks": unseen},
            culprits=(),
        )
    ]


def unexplained(record: RunRecord, findings: list[Finding]) -> list[Finding]:
    """The finding for ranks that ended abnormally when no error-severity finding explains the run."""
    if any(f.severity == "error" for f in findings):
        return []
    kill = record.monitor_event(schema.K_KILL)
    if kill and str(kill.get("reason", "")).startswith("signal"):
        return []  # interrupted by the user: the report says so
    exits = torchrun_exits(record.run_dir)
    ended = {r: how for r in record.ranks if (how := how_ended(record, r, exits))}
    if any(TEARDOWN_ABORT in rec.stderr_tail and rec.event(schema.K_FINISH) for rec in record.ranks.values()):
        # torchrun ends the others when a finished rank aborts at exit: victims of teardown.gloo-abort
        ended = {r: h for r, h in ended.items() if "ended (SIGTERM)" not in h and "without finishing" not in h}
    world = record.world_size or len(record.ranks)
    unseen = [r for r in range(world) if r not in record.ranks]
    if not ended:
        return []
    # the ranks that failed on their own come first; those that only lost a peer are its victims
    own = [
        r
        for r in ended
        if not (record.ranks[r].error and is_transport_error(record.ranks[r].error))
        and "ended (SIGTERM)" not in ended[r]
    ]
    culprits = own or ([] if unseen else sorted(ended))
    locs = []
    for r in sorted(ended):
        rec = record.ranks[r]
        site = (rec.error or {}).get("user_frame") or (rec.last_hb or {}).get("where")
        l = loc(r, site, "ended here" if r in culprits else "victim")
        if l:
            locs.append(l)
    msg = f"the run ended abnormally: {group_values(ended, first=culprits)}"
    hint = (
        "A rank that ends early takes the others down with it: read the first rank's error above "
        "(its stderr is in the run directory's logs/)."
    )
    ev: dict = {"ended": {str(r): h for r, h in ended.items()}}
    if unseen:
        from ddpdoctor.analysis.hang.damage import one_node

        msg += f"; {unseen_phrase(unseen, gone=one_node(record))}"
        hint = (
            "This node sees only its own ranks; a transport error here usually means a rank on another "
            "node failed or diverged first. Run ddpdoctor analyze with every node's run directory, "
            f"{analyze_command(record.run_dir)}, for the whole job's diagnosis."
        )
        ev["unseen_ranks"] = unseen
    return [
        Finding(
            CRASH_ABNORMAL_EXIT, "error", msg, hint, tuple(sorted(ended)), tuple(locs), ev, culprits=tuple(culprits)
        )
    ]
