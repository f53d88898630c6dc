"""Runs that never became a distributed job: the script ended before init_process_group; and in the launcher
form (the user's own launch command), ranks the probes could not enter. Pure."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.ids import LAUNCH_RANK_NOT_ENTERED, RUN_FAILED_BEFORE_INIT, RUN_NO_DISTRIBUTED, RUN_NOT_STARTED
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def _torchrun_tail(record: RunRecord) -> str:
    import os

    try:
        with open(os.path.join(record.run_dir, schema.TORCHRUN_LOG), encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f.read()[-4000:].splitlines() if ln.strip()]
    except OSError:
        return ""
    errs = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errs or lines or [""])[-1][:300]


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """Findings for a run in which no rank reached init_process_group (the script never started training)."""
    from ddpdoctor.analysis.hang.damage import cut_init

    if any(rec.event(schema.K_INIT) for rec in record.ranks.values()) or cut_init(record):
        return []  # a rank initialised (or its cut events hide an init its heartbeats prove)
    if record.monitor_event(schema.K_VERDICT) or record.monitor_event(schema.K_KILL):
        return []
    ends = [(r, rec.event(schema.K_FINISH), rec.error) for r, rec in record.ranks.items()]
    if record.manifest.get("mode") == "spawn" and not record.ranks:
        fin = next((e for e in reversed(record.launcher) if e.get("kind") == schema.K_FINISH), None)
        ends = [(0, fin, (fin or {}).get("error"))] if fin else []
    if not ends:
        if record.manifest.get("mode") == "launcher":
            return []  # not_entered says it: the command ran no rank the probes could enter
        ex = record.monitor_event(schema.K_EXIT)
        code = ex.get("returncode") if ex else None
        tail = _torchrun_tail(record)
        return [
            Finding(
                RUN_NOT_STARTED,
                "error",
                f"no rank started (torchrun exit code {code})" + (f": {tail}" if tail else ""),
                "Check the torchrun options (see torchrun.log in the run "
                "directory) and that this Python environment can run the script.",
                (),
            )
        ]
    if any(fin is None and not err for _r, fin, err in ends) and record.monitor_event(schema.K_EXIT) is not None:
        # a rank ended without finishing (killed by a signal, or by torchrun after a peer died) before any
        # rank initialised: a crash at start-up, which ending.unexplained names with its culprit, never a
        # script that "finished without init_process_group"
        return []
    for r, fin, err in ends:
        if err:
            where = loc(r, err.get("user_frame"), "raised")
            at = f" at {where.file}:{where.line}" if where else ""
            first = (str(err.get("message", "")).strip().splitlines() or [""])[0][:200]
            return [
                Finding(
                    RUN_FAILED_BEFORE_INIT,
                    "error",
                    f"the script raised {err.get('type')}{at} before init_process_group: {first}",
                    "Fix the error above; ddpdoctor diagnoses the job once the ranks initialise.",
                    (r,),
                    (where,) if where else (),
                    {"code": 1},
                    culprits=(r,),
                )
            ]
        if fin and fin.get("code") not in (0, None):
            return [
                Finding(
                    RUN_FAILED_BEFORE_INIT,
                    "error",
                    f"the script exited with code {fin.get('code')} before init_process_group",
                    "Fix what made it exit; ddpdoctor diagnoses the job once the ranks initialise.",
                    (r,),
                    (),
                    {"code": fin.get("code")},
                    culprits=(r,),
                )
            ]
    return [
        Finding(
            RUN_NO_DISTRIBUTED,
            "error",
            "the script finished without calling torch.distributed.init_process_group: nothing distributed to diagnose",
            "Run a DDP script (or `--probe healthy` for the built-in healthy job).",
            (),
        )
    ]


LAUNCHER_HINT = (
    "The probes enter each Python rank through the environment: PYTHONPATH (ddpdoctor's sitecustomize in front "
    "of yours) and DDPDOCTOR_ENTER. A launcher that starts ranks with an environment of its own (env -i, a "
    "PYTHONPATH it sets rather than extends, python -I or -E, a container or ssh without the variables), a rank "
    "that is not Python, or a Python without ddpdoctor's dependencies leaves the rank unprobed: pass both "
    "variables on (docs/cli.md, the launcher form)."
)


def _local_world(record: RunRecord) -> int | None:
    """The most ranks a reporting rank's launcher said it ran on its node (LOCAL_WORLD_SIZE), if any said."""
    sizes = [
        int(e["local_world_size"])
        for rec in record.ranks.values()
        if (e := rec.event(schema.K_START)) and isinstance(e.get("local_world_size"), int)
    ]
    return max(sizes) if sizes else None


def not_entered(record: RunRecord, cfg: Config) -> list[Finding]:
    """``launch.rank-not-entered`` (the launcher form): the command ran no rank the probes entered, or the
    world size the entered ranks report names ranks of this node that never reported in. Ranks another node
    runs (the world exceeds the node's LOCAL_WORLD_SIZE) are multinode.partial-view's to name."""
    if record.manifest.get("mode") != "launcher":
        return []
    ex = record.monitor_event(schema.K_EXIT)
    code = ex.get("returncode") if ex else None
    if not record.ranks:
        if ex is None or record.monitor_event(schema.K_VERDICT):
            return []
        tail = _torchrun_tail(record)
        tail = tail if "rror" in tail else ""  # the command's own output is no reason
        return [
            Finding(
                LAUNCH_RANK_NOT_ENTERED,
                "error",
                f"no rank of your launch command reported in (it exited with code {code})"
                + (f": {tail}" if tail else ": no Python process of it called init_process_group with the probes"),
                LAUNCHER_HINT,
                (),
                evidence={"returncode": code, "unseen_ranks": None},
            )
        ]
    world = record.world_size or 0
    local = _local_world(record)
    if local is not None and world > local:
        return []  # ranks on other nodes: not this launcher's to run here
    unseen = [r for r in range(world) if r not in record.ranks]
    if not unseen:
        return []
    names = ", ".join(map(str, unseen))
    return [
        Finding(
            LAUNCH_RANK_NOT_ENTERED,
            "error",
            f"the probes could not enter rank{'s' if len(unseen) > 1 else ''} {names}: the entered ranks report "
            f"a world of {world}, and {len(record.ranks)} reported in; a verdict covers the entered ranks only",
            LAUNCHER_HINT,
            tuple(unseen),
            evidence={"returncode": code, "unseen_ranks": unseen, "world_size": world},
            culprits=tuple(unseen),
        )
    ]
