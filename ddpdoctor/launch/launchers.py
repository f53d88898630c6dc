"""Multi-node launchers: torchrun's multi-node options from the environment a launcher sets. Stdlib only.

``srun ddpdoctor hang train.py`` on every node of an allocation needs no torchrun options: a job is its
SLURM *job step*: the number of nodes, this node's rank and the rendezvous endpoint come from the step's node
list (the first host of ``SLURM_STEP_NODELIST``, not of the allocation: a step may run on part of it), its id
is ``JOBID.STEPID``, and its ports are the step's own (:func:`step_ports`: two jobs, or two steps, on the
same nodes never share a rendezvous or a job store). A Kubernetes PyTorchJob sets torchrun's own ``PET_*`` variables (with
torchrun in the container) or ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` (one process per pod,
``WORLD_SIZE`` pods). Options given on the command line always win; a value is only ever filled in where the
user gave none. Which source was used is returned, so the run's first line can say so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_PORT = 29500  # torchrun's default --master-port
# SLURM: each job step's rendezvous port is PORT_BASE + 2 * slot (the job store the next one), slot from the
# job and step ids, so that two jobs (or two steps of one job) on the same nodes never meet: 20000-27999,
# below Linux's ephemeral range (32768-60999), where the kernel's own picks would collide with it
PORT_BASE = 20000
PORT_SLOTS = 4000
STEP_STRIDE = 16  # consecutive job ids are this many slots apart: up to 16 steps of a job never meet another's

# the option keys (click's names) that make a run multi-node; without any of them ddpdoctor passes --standalone
MULTI_KEYS = ("nnodes", "node_rank", "rdzv_endpoint", "master_addr", "master_port", "rdzv_backend")

# torchrun reads each of its options from PET_<NAME> when it is not given: ddpdoctor must see them too
# (it would otherwise add --standalone, which overrides them)
_PET = {
    "nnodes": "PET_NNODES",
    "node_rank": "PET_NODE_RANK",
    "rdzv_backend": "PET_RDZV_BACKEND",
    "rdzv_endpoint": "PET_RDZV_ENDPOINT",
    "rdzv_id": "PET_RDZV_ID",
    "master_addr": "PET_MASTER_ADDR",
    "master_port": "PET_MASTER_PORT",
}
_INTS = ("node_rank", "master_port")


class NodeListError(ValueError):
    """A SLURM node list that does not parse."""


def _split_top(text: str) -> list[str]:
    """Split at the commas outside brackets: ``a1,b[2-3]`` -> ``["a1", "b[2-3]"]``."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise NodeListError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise NodeListError(f"unbalanced '[' in {text!r}")
    parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts) if p]


def _range_values(body: str) -> list[str]:
    """``01-04,07`` -> ``["01", "02", "03", "04", "07"]`` (zero padding kept, as SLURM writes it)."""
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise NodeListError(f"bad range {item!r} in [{body}]")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise NodeListError(f"descending range {item!r} in [{body}]")
        width = len(lo) if lo.startswith("0") else 0
        out += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    return out


def _expand(item: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    return [head + v + rest for v in _range_values(m.group(1)) for rest in _expand(tail)]


def expand_nodelist(text: str) -> list[str]:
    """SLURM's compressed host list in order: ``node[01-04,07]`` -> node01..node04, node07;
    ``a1,b[2-3]`` -> a1, b2, b3; ``rack[1-2]-n[1-2]`` -> rack1-n1, rack1-n2, rack2-n1, rack2-n2."""
    hosts: list[str] = []
    for part in _split_top(text.strip()):
        hosts += _expand(part)
    if not hosts:
        raise NodeListError(f"empty node list {text!r}")
    return hosts


def _given(opts: Mapping[str, Any], key: str) -> bool:
    return opts.get(key) is not None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def step_ports(job: str, step: str) -> tuple[int, int]:
    """(rendezvous port, job store port) of a SLURM job step: ``PORT_BASE + 2 * slot`` and the next one,
    ``slot = (job * STEP_STRIDE + step) % PORT_SLOTS``, the same on every node of the step without any
    message between them. Non-numeric ids (a heterogeneous job's ``123+1``) are hashed stably."""

    def num(text: str) -> int:
        text = text.strip()
        return int(text) if text.isdigit() else sum((i + 1) * ord(c) for i, c in enumerate(text))

    slot = (num(job) * STEP_STRIDE + num(step)) % PORT_SLOTS
    return PORT_BASE + 2 * slot, PORT_BASE + 2 * slot + 1


@dataclass(frozen=True)
class SlurmStep:
    """The SLURM job step this process is a task of (:func:`slurm_step`)."""

    job: str  # SLURM_JOB_ID
    step: str  # SLURM_STEP_ID ("0" when SLURM gives none)
    hosts: tuple[str, ...]  # the step's nodes, in order
    nnodes: int
    node: int | None  # this node's index in the step
    host: str  # this node's name (SLURMD_NODENAME)
    local_id: int  # this task's index on its node (SLURM_LOCALID): 0 leads, see launch/leader.py
    gpus: int | None  # the GPUs of the step on this node (SLURM_GPUS_ON_NODE)
    # SLURM_CLUSTER_NAME: job ids are unique only within one cluster, and a host can be a node of two
    # (a test cluster beside the production one, or two clusters started in namespaces of one machine)
    cluster: str = ""
    tasks: int | None = None  # the step's tasks on this node (SLURM_STEP_TASKS_PER_NODE): one a GPU, often

    @property
    def id(self) -> str:
        """``JOBID.STEPID``: the rendezvous id, and the job store's job."""
        return f"{self.job}.{self.step}"


def slurm_step(env: Mapping[str, str]) -> SlurmStep | None:
    """The job step of a SLURM task (srun), from the step's variables (those of the allocation only where
    the step's are missing, e.g. in the batch script); None outside SLURM or with a node list that does not
    parse."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job or not nodelist:
        return None
    try:
        hosts = expand_nodelist(nodelist)
    except NodeListError:
        return None
    stepped = bool(env.get("SLURM_STEP_NODELIST"))
    nnodes = (
        (_int(env.get("SLURM_STEP_NUM_NODES")) if stepped else None)
        or (None if stepped else _int(env.get("SLURM_NNODES")) or _int(env.get("SLURM_JOB_NUM_NODES")))
        or len(hosts)
    )
    host = env.get("SLURMD_NODENAME") or ""
    # the node's index in the step: SLURM_NODEID counts the step's nodes; the host's place in the step's
    # list is the same and does not depend on which SLURM version set which variable
    node = hosts.index(host) if host in hosts else _int(env.get("SLURM_NODEID"))
    step = (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "0").strip()
    return SlurmStep(
        job=job,
        step=step,
        hosts=tuple(hosts),
        nnodes=nnodes,
        node=node,
        host=host or (hosts[node] if node is not None and node < len(hosts) else ""),
        local_id=_int(env.get("SLURM_LOCALID")) or 0,
        gpus=_int(env.get("SLURM_GPUS_ON_NODE")),
        cluster=(env.get("SLURM_CLUSTER_NAME") or "").strip(),
        tasks=tasks_on_node(
            env.get("SLURM_STEP_TASKS_PER_NODE") or ("" if stepped else env.get("SLURM_TASKS_PER_NODE") or ""), node
        ),
    )


def tasks_on_node(spec: str, node: int | None) -> int | None:
    """The tasks on node ``node`` from SLURM's ``*_TASKS_PER_NODE`` (``2(x3),1``: 2 on each of the first
    three nodes, 1 on the fourth); None when it does not say."""
    if node is None or not spec.strip():
        return None
    i = 0
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return None
        i += int(m.group(2) or 1)
        if node < i:
            return int(m.group(1))
    return None


def tasks_line(nproc: str, env: Mapping[str, str]) -> str | None:
    """One line where a SLURM step has more than one task on this node and ddpdoctor does not start one rank
    for each: one ddpdoctor runs each node's ranks (launch/leader.py), so the job has ``nproc`` ranks a node,
    not one a task, and the step would otherwise run fewer ranks than it has tasks without a word."""
    step = slurm_step(env)
    if step is None or not step.tasks or step.tasks <= 1 or not nproc.isdigit() or int(nproc) == step.tasks:
        return None
    ranks = f"{nproc} rank{'s' if nproc != '1' else ''}"
    return (
        f"job step {step.id} has {step.tasks} tasks on {step.host or 'this node'}, and ddpdoctor starts {ranks} "
        f"there (--nproc-per-node {nproc}), not one a task: task 0 runs the node's ranks, the others wait for it "
        f"and write its report; --nproc-per-node {step.tasks} gives the node one rank a task"
    )


def from_environment(opts: Mapping[str, Any], env: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """The torchrun options with what the launcher's environment says filled in where the user gave
    nothing; and the source used (``"SLURM"``, ``"PET_*"``, ``"MASTER_ADDR/WORLD_SIZE"``) or None."""
    out = dict(opts)
    # torchrun's own variables (a PyTorchJob with torchrun in the container): they are torchrun's options
    pet = {k: env[v] for k, v in _PET.items() if env.get(v) and not _given(out, k)}
    if pet:
        for k, v in pet.items():
            out[k] = int(v) if k in _INTS and v.isdigit() else v
        return out, "PET_*"
    if any(_given(out, k) for k in ("rdzv_endpoint", "rdzv_backend")) and _given(out, "nnodes"):
        return out, None  # a complete multi-node command line: nothing to add
    slurm = slurm_step(env)
    if slurm is not None:
        nnodes, node_id, first = slurm.nnodes, slurm.node, slurm.hosts[0]
        if nnodes <= 1:
            return out, None
        static = _given(out, "master_addr") or _given(out, "master_port")
        if not _given(out, "nnodes"):
            out["nnodes"] = str(nnodes)
        if static:
            if not _given(out, "node_rank") and node_id is not None:
                out["node_rank"] = node_id
            return out, "SLURM"
        port = _int(env.get("MASTER_PORT")) or step_ports(slurm.job, slurm.step)[0]
        for k, v in (("rdzv_backend", "c10d"), ("rdzv_endpoint", f"{first}:{port}"), ("rdzv_id", slurm.id)):
            if not _given(out, k):
                out[k] = v
        return out, "SLURM"
    if any(_given(out, k) for k in MULTI_KEYS) or env.get("TORCHELASTIC_RUN_ID") or env.get("LOCAL_RANK"):
        return out, None
    world, rank = _int(env.get("WORLD_SIZE")), _int(env.get("RANK"))
    addr, mport = env.get("MASTER_ADDR"), _int(env.get("MASTER_PORT"))
    if world and world > 1 and rank is not None and addr and mport:
        # one ddpdoctor per pod (WORLD_SIZE pods): each pod is a node of torchrun's static rendezvous
        out.update(nnodes=str(world), node_rank=rank, master_addr=addr, master_port=mport)
        return out, "MASTER_ADDR/WORLD_SIZE"
    return out, None


def max_nodes(nnodes: Any) -> int:
    """The most nodes ``--nnodes`` allows: ``2`` -> 2, ``1:4`` -> 4; 1 when not given or not a number."""
    text = str(nnodes or "1").split(":")[-1].strip()
    return int(text) if text.isdigit() and int(text) > 0 else 1


def port_taken(port: int) -> bool:
    """Something listens on ``port`` on this host (any address). SO_REUSEADDR: a port whose last connections
    linger in TIME_WAIT is free (torch's stores bind it the same way), one with a listener is not."""
    import socket

    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
        except OSError as e:
            import errno

            if e.errno == errno.EADDRINUSE:
                return True
        finally:
            s.close()
    return False


def step_port_conflict(opts: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """On the first node of a SLURM step, before torchrun starts: the step's rendezvous or job store port
    already has a listener here (another job's, most likely). torchrun would then silently join that job's
    rendezvous store as a client; this says so in one line instead. None when free, elsewhere, or not SLURM."""
    slurm = slurm_step(env)
    endpoint = str(opts.get("rdzv_endpoint") or "")
    if slurm is None or slurm.node != 0 or slurm.nnodes <= 1 or not endpoint.startswith(f"{slurm.hosts[0]}:"):
        return None
    port = _int(endpoint.rpartition(":")[2])
    if port is None:
        return None
    for p, what in ((port, "rendezvous"), (port + 1, "job store")):
        if port_taken(p):
            return (
                f"port {p} on {slurm.host or slurm.hosts[0]}, the {what} port of job step {slurm.id}, is already "
                f"in use (another job on this node?): set MASTER_PORT to a free port for this step"
            )
    return None


def default_nproc(env: Mapping[str, str]) -> str | None:
    """``--nproc-per-node`` from the launcher: the GPUs of the SLURM step on this node, else its tasks on this
    node where there are several, else CUDA_VISIBLE_DEVICES'; None when none says (the caller asks the driver,
    else uses 2)."""
    step = slurm_step(env)
    if step is not None and step.gpus:
        return str(step.gpus)
    if step is not None and step.tasks and step.tasks > 1:
        return str(step.tasks)  # one rank a task where the step has several a node (and no GPUs to count)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() not in ("", "-1"):
        return str(len([d for d in cvd.split(",") if d.strip()]))
    return None
