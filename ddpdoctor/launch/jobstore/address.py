"""Where a multi-node job's store is (the rendezvous host at its port + 1, ``--job-store``,
``$DDPDOCTOR_JOB_STORE``), and whose it is: the owner value that tells two jobs sharing a host:port apart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ddpdoctor.launch.launchers import max_nodes
from ddpdoctor.record import nodeview

OWNER_KEY = "ddpdoctor/owner"  # the store's first value, set by the node that serves it: the job it serves
S_OWNER = "ddpdoctor.owner"


class ForeignStore(RuntimeError):
    """The store at the job store's address serves another job (or is not a ddpdoctor job store at all)."""


def owner_value(job: str, host: str) -> bytes:
    """The value at :data:`OWNER_KEY`: which job the store serves, and where."""
    return nodeview.envelope(S_OWNER, job, host=host)


def owner_mismatch(raw: bytes | None, job: str) -> str | None:
    """Why a store whose owner value is ``raw`` is not this job's (None when it is): two jobs that happen to
    share a host:port (two SLURM jobs on one node, two torchruns given the same endpoint) are told apart."""
    if raw is None:
        return "it is not a ddpdoctor job store (no owner value)"
    doc, _note = nodeview.parse(raw, S_OWNER, job)
    if doc is not None:
        return None
    try:
        other = json.loads(raw)
        other_job = other.get("job") if isinstance(other, dict) else None
    except (ValueError, UnicodeDecodeError):
        other_job = None
    return f"it serves job {str(other_job)[:60]!r}" if other_job is not None else "its owner value does not decode"


@dataclass(frozen=True)
class StoreAddr:
    """Where the job store is and which job it serves."""

    host: str
    port: int
    job: str
    nnodes: int
    source: str  # how it was found: "rdzv-endpoint", "master-addr", "DDPDOCTOR_JOB_STORE", "--job-store"


def _opt(args: list[str] | tuple[str, ...], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _hostport(text: str, default_port: int) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        return host, int(rest.lstrip(":") or default_port)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return text, default_port
    return host, int(port)


def store_address(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT``) as (host, port); None when it is not one."""
    host, port = _hostport(text, 0)
    return (host, port) if host and 0 < port < 65536 else None


def resolve(
    torchrun_args: list[str] | tuple[str, ...], env: dict[str, str] | Any, option: str | None = None
) -> StoreAddr | None:
    """The job store of a multi-node run (None for a single node, or when no rendezvous host is known):
    ``option`` (--job-store), else $DDPDOCTOR_JOB_STORE, else the rendezvous host at its port + 1."""
    nnodes = max_nodes(_opt(torchrun_args, "--nnodes"))
    if nnodes <= 1 or "--standalone" in torchrun_args:
        return None
    rdzv_id = _opt(torchrun_args, "--rdzv-id")
    given, named = (option, "--job-store") if option else (env.get("DDPDOCTOR_JOB_STORE"), "DDPDOCTOR_JOB_STORE")
    endpoint = _opt(torchrun_args, "--rdzv-endpoint")
    addr = _opt(torchrun_args, "--master-addr")
    if endpoint:
        host, port = _hostport(endpoint, 29400)
        source = "rdzv-endpoint"
    elif addr:
        host, port = addr, int(_opt(torchrun_args, "--master-port") or 29500)
        source = "master-addr"
    else:
        host, port, source = "", 0, ""
    job = rdzv_id if rdzv_id and rdzv_id != "none" else f"{host}:{port}"
    if given:
        hp = store_address(given)
        return StoreAddr(hp[0], hp[1], job, nnodes, named) if hp else None
    if not host:
        return None
    return StoreAddr(host, port + 1, job, nnodes, source)
