"""Multi-node launchers: torchrun's multi-node options from the environment a launcher sets. Stdlib only.

``srun ddpdoctor hang train.py`` on every node of an allocation needs no torchrun options: the
number of nodes, this node's rank, the rendezvous endpoint (the first host of the node list) and its id (the
job id) come from SLURM's variables. A Kubernetes PyTorchJob sets torchrun's own ``PET_*`` variables (with
torchrun in the container) or ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` (one process per pod,
``WORLD_SIZE`` pods). Options given on the command line always win; a value is only ever filled in where the
user gave none. Which source was used is returned, so the run's first line can say so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DEFAULT_PORT = 29500  # torchrun's default --master-port

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
    slurm = _slurm(env)
    if slurm is not None:
        nnodes, node_id, first, job = slurm
        if nnodes <= 1:
            return out, None
        static = _given(out, "master_addr") or _given(out, "master_port")
        if not _given(out, "nnodes"):
            out["nnodes"] = str(nnodes)
        if static:
            if not _given(out, "node_rank") and node_id is not None:
                out["node_rank"] = node_id
            return out, "SLURM"
        port = _int(env.get("MASTER_PORT")) or DEFAULT_PORT
        for k, v in (("rdzv_backend", "c10d"), ("rdzv_endpoint", f"{first}:{port}"), ("rdzv_id", job)):
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


def _slurm(env: Mapping[str, str]) -> tuple[int, int | None, str, str] | None:
    """(nodes, this node's id, first host, job id) of a SLURM allocation, or None outside one."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or env.get("SLURM_STEP_NODELIST")
    if not job or not nodelist:
        return None
    try:
        hosts = expand_nodelist(nodelist)
    except NodeListError:
        return None
    nnodes = (
        _int(env.get("SLURM_STEP_NUM_NODES"))
        or _int(env.get("SLURM_NNODES"))
        or _int(env.get("SLURM_JOB_NUM_NODES"))
        or len(hosts)
    )
    return nnodes, _int(env.get("SLURM_NODEID")), hosts[0], job


def max_nodes(nnodes: Any) -> int:
    """The most nodes ``--nnodes`` allows: ``2`` -> 2, ``1:4`` -> 4; 1 when not given or not a number."""
    text = str(nnodes or "1").split(":")[-1].strip()
    return int(text) if text.isdigit() and int(text) > 0 else 1
