"""Find the DDP jobs of this user on this host and their rank processes, from outside (no torch).

A torchrun worker carries ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in its environment and is a child
of torchrun's agent; the ranks of one job share the agent (or ``TORCHELASTIC_RUN_ID``, or
``MASTER_ADDR:MASTER_PORT``). A DataLoader worker inherits its rank's environment: a rank-looking process
whose parent is a rank of the same job is not a rank. An ``mp.spawn`` rank is a
``multiprocessing.spawn`` child of a Python parent; child ``i`` (in start order) is rank ``i``, as in the
tutorials' ``setup(rank, world_size)``; the stack dump confirms it runs ``torch.multiprocessing.spawn``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

_RANK_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
_JOB_KEYS = (
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
)
# what decides whether, and how, attach can take a rank's flight recorder (ddpdoctor/attach/flight.py)
FR_ENV_KEYS = (
    "TORCH_FR_DUMP_DYNAMIC_FILE_NAME",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
    "TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_NCCL_COORD_CHECK_MILSEC",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_WORKER_SERVER_SOCKET",
    "XDG_CACHE_HOME",
    "HOME",
)


@dataclass
class RankProc:
    pid: int
    rank: int
    local_rank: int
    world_size: int | None
    cmdline: list[str]
    cwd: str
    create_time: float
    env: dict[str, str] = field(default_factory=dict)  # only the keys in _RANK_KEYS + _JOB_KEYS + FR_ENV_KEYS


@dataclass
class Job:
    kind: str  # "torchrun" | "spawn"
    launcher: int | None  # torchrun's agent, or the mp.spawn parent (pid)
    ranks: list[RankProc]
    world_size: int | None
    local_world_size: int | None
    script: str | None  # absolute path of the training script, when it can be told
    key: str

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.ranks]

    def missing_local(self) -> list[int]:
        """Global ranks of this node's workers that are gone (fewer children than LOCAL_WORLD_SIZE)."""
        if self.kind != "torchrun" or not self.local_world_size or not self.ranks:
            return []
        have = {r.local_rank for r in self.ranks}
        base = self.ranks[0].rank - self.ranks[0].local_rank
        return [base + lr for lr in range(self.local_world_size) if lr not in have]


def _mine(p: psutil.Process) -> bool:
    try:
        return p.uids().real == os.getuid()
    except (psutil.Error, AttributeError):
        return False


def _env(p: psutil.Process) -> dict[str, str] | None:
    try:
        return p.environ()
    except psutil.Error:
        return None


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _is_spawn_child(cmd: list[str]) -> bool:
    text = " ".join(cmd)
    return "multiprocessing.spawn" in text and "--multiprocessing-fork" in text


def script_of(cmd: list[str], cwd: str) -> str | None:
    """The script a Python command line runs (``python [-u] [-X ..] script.py``), absolute."""
    skip_next = {"-X", "-W", "-Q"}
    i = 1
    while i < len(cmd):
        a = cmd[i]
        if a in ("-m", "-c"):
            return None
        if a in skip_next:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return os.path.normpath(os.path.join(cwd, a))
    return None


def _torchrun_script(cmd: list[str], cwd: str) -> str | None:
    """The training script of a torchrun agent's command line: the first argument ending in .py."""
    for a in cmd[1:]:
        if a.endswith(".py") and not a.endswith(("run.py", "torchrun")):
            return os.path.normpath(os.path.join(cwd, a))
    return None


def _proc_info(p: psutil.Process) -> tuple[list[str], str, float] | None:
    try:
        with p.oneshot():
            return p.cmdline(), p.cwd(), p.create_time()
    except psutil.Error:
        return None


def find_jobs(pid: int | None = None) -> list[Job]:
    """Every torchrun/mp.spawn job of this user on this host, or the one that ``pid`` (an agent, a rank, an
    mp.spawn parent or child) belongs to. mp.spawn jobs are candidates until their stacks confirm them."""
    procs = {p.pid: p for p in psutil.process_iter() if _mine(p)}
    envs: dict[int, dict[str, str]] = {}
    rankish: dict[int, dict[str, str]] = {}
    for q, p in procs.items():
        env = _env(p)
        if env is None:
            continue
        envs[q] = env
        if all(k in env for k in _RANK_KEYS) and _int(env.get("RANK")) is not None:
            rankish[q] = env

    def parent(q: int) -> int | None:
        try:
            return procs[q].ppid() if q in procs else None
        except psutil.Error:
            return None

    jobs: dict[str, Job] = {}
    for q, env in sorted(rankish.items()):
        pp = parent(q)
        if pp in rankish and rankish[pp].get("RANK") == env.get("RANK"):
            continue  # a DataLoader worker (or another child) of a rank
        info = _proc_info(procs[q])
        if info is None:
            continue
        cmd, cwd, ct = info
        launcher = pp if pp in procs and pp not in rankish else None
        key = (
            f"torchrun:{launcher}"
            if launcher
            else f"env:{env.get('TORCHELASTIC_RUN_ID') or ''}:{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
        )
        job = jobs.get(key)
        if job is None:
            lcmd = _proc_info(procs[launcher]) if launcher else None
            script = script_of(cmd, cwd) or (_torchrun_script(lcmd[0], lcmd[1]) if lcmd else None)
            job = jobs[key] = Job(
                "torchrun", launcher, [], _int(env.get("WORLD_SIZE")), _int(env.get("LOCAL_WORLD_SIZE")), script, key
            )
        job.ranks.append(
            RankProc(
                q,
                int(env["RANK"]),
                _int(env.get("LOCAL_RANK")) or 0,
                _int(env.get("WORLD_SIZE")),
                cmd,
                cwd,
                ct,
                {k: env[k] for k in _RANK_KEYS + _JOB_KEYS + FR_ENV_KEYS if k in env},
            )
        )
    # mp.spawn: multiprocessing.spawn children of a Python parent that is not itself a rank's helper
    children: dict[int, list[tuple[float, int, list[str], str]]] = {}
    for q, p in procs.items():
        if q in rankish:
            continue
        info = _proc_info(p)
        if info is None or not _is_spawn_child(info[0]):
            continue
        pp = parent(q)
        if pp is None or pp in rankish or pp not in procs:
            continue
        pinfo = _proc_info(procs[pp])
        if pinfo is None or _is_spawn_child(pinfo[0]):
            continue  # a spawn-started helper (DataLoader worker) of a spawned rank
        children.setdefault(pp, []).append((info[2], q, info[0], info[1]))
    for pp, kids in children.items():
        pinfo = _proc_info(procs[pp])
        if pinfo is None:
            continue
        kids.sort()
        script = script_of(pinfo[0], pinfo[1])
        ranks = [
            RankProc(
                q,
                i,
                i,
                len(kids),
                cmd,
                cwd,
                ct,
                {k: envs.get(q, {})[k] for k in _JOB_KEYS + FR_ENV_KEYS if k in envs.get(q, {})},
            )
            for i, (ct, q, cmd, cwd) in enumerate(kids)
        ]
        jobs[f"spawn:{pp}"] = Job("spawn", pp, ranks, len(kids), len(kids), script, f"spawn:{pp}")
    out = sorted(jobs.values(), key=lambda j: min(j.pids))
    for j in out:
        j.ranks.sort(key=lambda r: r.rank)
    if pid is not None:
        out = [j for j in out if pid == j.launcher or pid in j.pids]
    return out
