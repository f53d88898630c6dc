"""Pure: the ranks' health results -> collectives, bandwidth rows (nccl-tests' definitions) and findings.

algbw = bytes / time (the slowest rank's time: a collective is as fast as its slowest member);
busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_gather and reduce_scatter, x 1 for broadcast.
"""

from __future__ import annotations

import re
from typing import Any

from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.analysis.ids import (
    DOCTOR_CLOCK_SKEW,
    DOCTOR_COLLECTIVE_FAILED,
    DOCTOR_COLLECTIVE_WRONG,
    DOCTOR_HANG,
    DOCTOR_INIT_FAILED,
    DOCTOR_LAUNCH_FAILED,
    DOCTOR_LOW_BUSBW,
    DOCTOR_MASTER_ADDR,
    DOCTOR_MASTER_UNREACHABLE,
    DOCTOR_PORT_IN_USE,
    DOCTOR_RANK_ERROR,
    DOCTOR_RANK_MISSING,
    DOCTOR_SOCKET_IFNAME,
    DOCTOR_WORLD_SIZE_MISMATCH,
)

BUS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
CLOCK_SKEW_S = 2.0

WRONG_HINT = (
    "A collective that returns a wrong result without an error is a broken transport or GPU: check the "
    "GPUs' ECC errors (`nvidia-smi -q -d ECC`), run nccl-tests between these ranks, try NCCL_P2P_DISABLE=1 "
    "or NCCL_IB_DISABLE=1 to find the faulty path, and keep this node out of jobs until it passes."
)


def _sig(x: float) -> float:
    """Four significant figures: a slow link's 0.0212 GB/s keeps its precision (round(x, 4) cut it to 0.2 %)."""
    return float(f"{x:.4g}")


def _key(row: dict[str, Any]) -> tuple:
    return (row["op"], row.get("dtype", "-"), row.get("bytes", 0))


def merge_collectives(ranks: dict[int, dict[str, Any]], backend: str) -> list[dict[str, Any]]:
    order: list[tuple] = []
    per: dict[tuple, dict[int, dict[str, Any]]] = {}
    for r, res in sorted(ranks.items()):
        for x in res.get("collectives") or []:
            k = _key(x)
            if k not in per:
                order.append(k)
                per[k] = {}
            per[k][r] = x
    out: list[dict[str, Any]] = []
    row: dict[str, Any]
    for k in order:
        rows = per[k]
        missing = sorted(r for r in ranks if r not in rows)
        wrong = sorted(r for r, x in rows.items() if x.get("ok") is False and not x.get("raised"))
        failed = sorted(r for r, x in rows.items() if x.get("ok") is False and x.get("raised"))
        unsupported = [r for r, x in rows.items() if x.get("supported") is False]
        row = {"op": k[0], "dtype": k[1], "bytes": k[2]}
        if unsupported and not wrong and not failed:
            row.update(ok=None, supported=False, detail=f"not supported by {backend}")
        else:
            row.update(ok=not (wrong or failed or missing), supported=True)
            details = []
            if wrong:
                details.append(f"wrong result on {ranks_phrase(wrong)}: {rows[wrong[0]].get('detail', '')}")
            if failed:
                details.append(f"raised on {ranks_phrase(failed)}: {rows[failed[0]].get('detail', '')}")
            if missing:
                details.append(f"no result from {ranks_phrase(missing)}")
            row["detail"] = "; ".join(details)
        row["wrong_ranks"], row["failed_ranks"], row["missing_ranks"] = wrong, failed, missing
        row["seconds"] = max((float(x.get("seconds") or 0) for x in rows.values()), default=0.0)
        out.append(row)
    return out


def merge_bandwidth(ranks: dict[int, dict[str, Any]], world: int) -> list[dict[str, Any]]:
    per: dict[tuple, dict[int, dict[str, Any]]] = {}
    order: list[tuple] = []
    for r, res in sorted(ranks.items()):
        for row in res.get("bandwidth") or []:
            k = (row["op"], row["bytes"])
            if k not in per:
                order.append(k)
                per[k] = {}
            per[k][r] = row
    out = []
    for op, nbytes in order:
        rows = per[(op, nbytes)]
        errs = {r: x for r, x in rows.items() if "error" in x}
        if errs:
            r0 = min(errs)
            unsup = errs[r0].get("supported") is False
            out.append(
                {
                    "op": op,
                    "bytes": nbytes,
                    "algbw_gbps": None,
                    "busbw_gbps": None,
                    "ok": None if unsup else False,
                    "supported": not unsup,
                    "detail": errs[r0]["error"],
                    "ranks": sorted(errs),
                }
            )
            continue
        slowest = max(rows, key=lambda r: rows[r]["time_s"])
        t = float(rows[slowest]["time_s"])
        algbw = nbytes / t / 1e9 if t > 0 else 0.0
        out.append(
            {
                "op": op,
                "bytes": nbytes,
                "time_us": round(t * 1e6, 1),
                "algbw_gbps": _sig(algbw),
                "busbw_gbps": _sig(algbw * BUS[op](world)) if world else 0.0,
                "slowest_rank": slowest,
                "fastest_us": round(min(float(x["time_s"]) for x in rows.values()) * 1e6, 1),
                "iters": rows[slowest].get("iters"),
                "ok": True,
                "supported": True,
            }
        )
    return out


_LAUNCH_PATTERNS = [
    (
        re.compile(r"Unable to find address for:? *(\S+)"),
        DOCTOR_SOCKET_IFNAME,
        "the socket interface {0} does not exist on a node",
        "Set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to an interface every node has (`ip -br addr`), or unset it.",
    ),
    (
        re.compile(r"[Aa]ddress already in use|EADDRINUSE"),
        DOCTOR_PORT_IN_USE,
        "the rendezvous port is already in use",
        "Choose a free --master-port, or end the job that holds it (`ss -ltnp`).",
    ),
    (
        re.compile(
            r"Name or service not known|nodename nor servname|Temporary failure in name resolution|"
            r"getaddrinfo"
        ),
        DOCTOR_MASTER_ADDR,
        "the master address does not resolve",
        "Use the master node's IP address or a name every node resolves.",
    ),
    (
        re.compile(
            r"Connection refused|No route to host|Network is unreachable|[Cc]onnect(ion)? timed out|"
            r"timed out.*(connect|store|rendezvous)|failed to connect|RendezvousTimeoutError|"
            r"(Socket|Client) Timeout"
        ),
        DOCTOR_MASTER_UNREACHABLE,
        "the ranks could not reach the rendezvous (MASTER_ADDR:MASTER_PORT)",
        "Check that the master node runs the same command, that MASTER_ADDR is its address on the network the "
        "nodes share, and that no firewall blocks MASTER_PORT (`nc -zv MASTER_ADDR MASTER_PORT` from each node).",
    ),
]


_LOG_PREFIX = re.compile(r"^\[[WEIF]\d{4} [\d:.]+ [\w.]+:\d+\] (\[c10d\] )?")


def classify(text: str) -> tuple[str, str, str, str] | None:
    """A launch or init error message -> (finding id, what, hint, the line that says it)."""
    for pat, fid, what, hint in _LAUNCH_PATTERNS:
        for line in text.splitlines():
            m = pat.search(line)
            if m and "frame #" not in line:
                return fid, what.format(*(g or "" for g in m.groups())), hint, _LOG_PREFIX.sub("", line.strip())[:300]
    return None


def findings(
    ranks: dict[int, dict[str, Any]],
    expected_world: int | None,
    collectives: list[dict[str, Any]],
    bandwidth: list[dict[str, Any]],
    backend: str,
    min_busbw: float | None,
    timed_out: float | None,
    log_tail: str,
    env_ids: set[str],
) -> list[Finding]:
    out: list[Finding] = []
    world = max((int(r.get("world_size") or 0) for r in ranks.values()), default=0) or expected_world or 0
    # ranks that could not join
    init_err = {r: x["error"] for r, x in ranks.items() if (x.get("error") or {}).get("stage") == "init"}
    if init_err:
        r0 = min(init_err)
        msg = f"{init_err[r0]['type']}: {init_err[r0]['message']}"
        c = classify(msg)
        if not (c and c[0] in env_ids):  # already said by the environment check
            fid, what, hint = (
                c[:3]
                if c
                else (
                    DOCTOR_INIT_FAILED,
                    "init_process_group failed",
                    "Read the message; `ddpdoctor doctor --json -` shows the environment.",
                )
            )
            out.append(
                Finding(
                    fid,
                    "error",
                    f"{what}: {ranks_phrase(init_err)} could not join the process group ({msg})",
                    hint,
                    tuple(sorted(init_err)),
                    culprits=tuple(sorted(init_err)),
                    evidence={"message": msg},
                )
            )
    if not ranks:
        c = classify(log_tail)
        tail = " | ".join(l.strip() for l in log_tail.strip().splitlines() if "frame #" not in l)[-400:]
        if c and c[0] in env_ids:
            pass
        elif c:
            out.append(Finding(c[0], "error", f"{c[1]}: no rank started ({c[3]})", c[2], evidence={"log": c[3]}))
        else:
            why = f"within {timed_out:.0f} s" if timed_out else "before it ended"
            out.append(
                Finding(
                    DOCTOR_LAUNCH_FAILED,
                    "error",
                    f"torchrun started no rank {why}" + (f" ({tail})" if tail else ""),
                    "Check the torchrun options (--nnodes, --rdzv-endpoint, --master-addr/--master-port): "
                    "every node must run the same command and reach the master; torchrun.log in the run "
                    "directory has torchrun's own messages.",
                    evidence={"log": tail},
                )
            )
        return out
    if expected_world and world and world != expected_world:
        out.append(
            Finding(
                DOCTOR_WORLD_SIZE_MISMATCH,
                "error",
                f"the process group has {world} ranks, {expected_world} expected from --nnodes x --nproc-per-node",
                "Give every node the same --nnodes and --nproc-per-node; check "
                "that each node started once (and only once).",
                evidence={"world_size": world, "expected": expected_world},
            )
        )
    elif expected_world and len(ranks) < expected_world and not init_err and timed_out:
        absent = sorted(set(range(expected_world)) - set(ranks))
        out.append(
            Finding(
                DOCTOR_RANK_MISSING,
                "error",
                f"{ranks_phrase(absent)} never started within {timed_out:.0f} s",
                "See torchrun.log in the run directory.",
                tuple(absent),
                culprits=tuple(absent),
            )
        )
    stuck = {r: x.get("stage") for r, x in ranks.items() if x.get("stage") not in ("done",) and not x.get("error")}
    if stuck and timed_out:
        out.append(
            Finding(
                DOCTOR_HANG,
                "error",
                f"{ranks_phrase(stuck)} did not finish within {timed_out:.0f} s (stage: "
                f"{', '.join(sorted(set(map(str, stuck.values()))))})",
                "A collective that never completes: a rank on an unreachable network path, a wrong "
                "SOCKET_IFNAME on some node, or a peer that died. Run again with NCCL_DEBUG=INFO.",
                tuple(sorted(stuck)),
                culprits=(),
            )
        )
    late = {r: x["error"] for r, x in ranks.items() if x.get("error") and x["error"].get("stage") != "init"}
    if late:
        r0 = min(late)
        out.append(
            Finding(
                DOCTOR_RANK_ERROR,
                "error",
                f"{ranks_phrase(late)} failed during {late[r0]['stage']}: {late[r0]['type']}: {late[r0]['message']}",
                "A collective timed out or the process group broke: see the collectives above for "
                "the first one that failed.",
                tuple(sorted(late)),
                culprits=tuple(sorted(late)),
            )
        )
    wrong: dict[str, list[dict[str, Any]]] = {}
    for row in collectives:
        if row["wrong_ranks"]:
            wrong.setdefault(row["op"], []).append(row)
    for op, rows in wrong.items():
        rs = sorted({r for c in rows for r in c["wrong_ranks"]})
        out.append(
            Finding(
                DOCTOR_COLLECTIVE_WRONG,
                "error",
                f"{op} returns a wrong result ({', '.join(c['dtype'] for c in rows)}) on "
                f"{ranks_phrase(rs)}: {rows[0]['detail']}",
                WRONG_HINT,
                tuple(rs),
                culprits=tuple(rs),
                evidence={"checks": rows},
            )
        )
    rank_level = any(f.id in (DOCTOR_HANG, DOCTOR_RANK_ERROR) or f.id in env_ids for f in out) or init_err
    failed = [c for c in collectives if c["failed_ranks"] or (c["missing_ranks"] and not rank_level)]
    if failed:
        rs = sorted({r for c in failed for r in c["failed_ranks"] + c["missing_ranks"]})
        names = sorted({f"{c['op']} {c['dtype']}" for c in failed})
        out.append(
            Finding(
                DOCTOR_COLLECTIVE_FAILED,
                "error",
                f"{len(failed)} collective check(s) raised on {ranks_phrase(rs)} ({', '.join(names[:6])}"
                f"{' ...' if len(names) > 6 else ''}): {failed[0]['detail']}",
                f"The {backend} backend failed these calls: upgrade or reinstall it (torch and NCCL "
                "versions above); with NCCL, run again with NCCL_DEBUG=WARN for the cause.",
                tuple(rs),
                culprits=tuple(rs),
                evidence={"checks": failed},
            )
        )
    clocks = {r: float(x["clock"]) for r, x in ranks.items() if x.get("clock")}
    hosts = {(x.get("env") or {}).get("host") for x in ranks.values()}
    if len(clocks) >= 2 and len(hosts) > 1:
        skew = max(clocks.values()) - min(clocks.values())
        if skew > CLOCK_SKEW_S:
            far = max(clocks, key=lambda r: abs(clocks[r] - sorted(clocks.values())[len(clocks) // 2]))
            out.append(
                Finding(
                    DOCTOR_CLOCK_SKEW,
                    "warning",
                    f"the nodes' clocks differ by {skew:.1f} s (rank {far} is furthest off)",
                    "Run NTP/chrony on every node: timestamps in logs and traces do not line up across "
                    "nodes otherwise.",
                    (far,),
                    culprits=(far,),
                    evidence={"skew_s": round(skew, 3)},
                )
            )
    if min_busbw is not None:
        ar = [b for b in bandwidth if b["op"] == "all_reduce" and b.get("busbw_gbps") is not None]
        if not ar:
            out.append(
                Finding(
                    DOCTOR_LOW_BUSBW,
                    "error",
                    f"--min-busbw {min_busbw:g}: no all_reduce bandwidth was measured",
                    "See the findings above.",
                )
            )
        else:
            top = max(ar, key=lambda b: b["bytes"])
            if top["busbw_gbps"] < min_busbw:
                out.append(
                    Finding(
                        DOCTOR_LOW_BUSBW,
                        "error",
                        f"all_reduce bus bandwidth at {_size(top['bytes'])} is {top['busbw_gbps']:.3g} GB/s, "
                        f"below --min-busbw {min_busbw:g} (slowest rank {top['slowest_rank']})",
                        "Check the links between the GPUs/nodes (`nvidia-smi topo -m`, NCCL_DEBUG=INFO "
                        "for the transport NCCL picked: P2P/NVLink, IB or sockets), that "
                        "NCCL_SOCKET_IFNAME names the fast network, and that no other job shares it.",
                        (int(top["slowest_rank"]),),
                        culprits=(int(top["slowest_rank"]),),
                        evidence={"row": top, "min_busbw_gbps": min_busbw},
                    )
                )
    return out


def _size(n: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.{0 if n % f == 0 else 1}f} {unit}"
    return f"{n:g} B"
