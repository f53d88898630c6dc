"""``ddpdoctor doctor``'s report: text, JSON (schema ``ddpdoctor.doctor`` version 2) and JUnit (one test
case per check). Pure: a result dict in, a string out."""

from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

from ddpdoctor.analysis.findings import Finding, Report, severity_rank
from ddpdoctor.analysis.ids import (
    DOCTOR_CLOCK_SKEW,
    DOCTOR_DEBUG_DETAIL,
    DOCTOR_FR_BUFFER_OFF,
    DOCTOR_FR_DUMP_TMP,
    DOCTOR_FR_HEARTBEAT_TIMEOUT,
    DOCTOR_FR_OLD_NAME,
    DOCTOR_GPU_ECC,
    DOCTOR_HANG,
    DOCTOR_INIT_FAILED,
    DOCTOR_LAUNCH_FAILED,
    DOCTOR_LOW_BUSBW,
    DOCTOR_MASTER_ADDR,
    DOCTOR_MASTER_UNREACHABLE,
    DOCTOR_NO_TORCH,
    DOCTOR_OPEN_FILES,
    DOCTOR_PORT_IN_USE,
    DOCTOR_RANK_ERROR,
    DOCTOR_RANK_MISSING,
    DOCTOR_SHM_SMALL,
    DOCTOR_SOCKET_IFNAME,
    DOCTOR_WORLD_SIZE_MISMATCH,
)
from ddpdoctor.health.analyze import _size

DOCTOR_SCHEMA = "ddpdoctor.doctor"
DOCTOR_VERSION = 2  # 2: environment, collectives, bandwidth, findings; 1 had only the probes' `results`
_MARK = {"error": "ERROR", "warning": "WARN", "note": "note"}


def _ver(v: Any) -> str:
    return str(v) if v not in (None, "") else "none"


def environment_lines(env: dict[str, Any], skipped: str) -> list[str]:
    out = [
        f"  python {env.get('python')}, torch {_ver(env.get('torch'))}, CUDA {_ver(env.get('cuda'))}, "
        f"NCCL {_ver(env.get('nccl'))}, cuDNN {_ver(env.get('cudnn'))}"
    ]
    b = env.get("backends") or {}
    out.append("  backends: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in b.items()))
    g = env.get("gpus") or {}
    devs = g.get("devices") or []
    if devs:
        for d in devs:
            ecc = d.get("ecc_uncorrected")
            out.append(
                f"  GPU {d['index']}: {d['name']}, {d['memory_bytes'] / 2**30:.0f} GiB, driver "
                f"{g.get('driver')}, uncorrected ECC errors {'n/a' if ecc is None else ecc}"
            )
    else:
        out.append(f"  GPUs: none (NVML: {g.get('nvml')}; torch sees {env.get('cuda_devices', 0)})")
    ifs = env.get("interfaces") or {}
    parts = [f"{n} {' '.join(i['ipv4'][:2]) or '-'}{'' if i['up'] else ' (down)'}" for n, i in sorted(ifs.items())]
    out.append("  interfaces: " + ", ".join(parts))
    out.append("  " + ", ".join(f"{k}={v}" if v else f"{k} unset" for k, v in (env.get("socket_ifname") or {}).items()))
    shm, nofile, m = env.get("shm"), env.get("open_files") or {}, env.get("master") or {}
    shm_text = f"/dev/shm {_size(shm['total_bytes'])} ({_size(shm['free_bytes'])} free)" if shm else "/dev/shm missing"
    if m.get("addr"):
        addrs = ", ".join(m.get("addresses") or []) or f"does not resolve ({m.get('error')})"
        master = f"MASTER_ADDR {m['addr']} -> {addrs}" + (" (this host)" if m.get("local") else "")
    else:
        master = "MASTER_ADDR unset (single node: --standalone)"
    out.append(f"  {shm_text}; open files {nofile.get('soft')} (hard {nofile.get('hard')}); {master}")
    hosts = sorted({str(r.get("host")) for r in env.get("ranks") or []})
    if hosts:
        out.append(f"  ranks on {len(hosts)} host(s): {', '.join(hosts[:8])}{' ...' if len(hosts) > 8 else ''}")
    if skipped:
        out.append(f"  {skipped}")
    return out


def _cell(row: dict[str, Any]) -> str:
    return "n/s" if row["ok"] is None else "ok" if row["ok"] else "WRONG" if row["wrong_ranks"] else "FAIL"


def collectives_lines(rows: list[dict[str, Any]], backend: str) -> list[str]:
    if not rows:
        return []
    dtypes = [d for d in dict.fromkeys(r["dtype"] for r in rows) if d != "-"]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    by = {(r["op"], r["dtype"]): r for r in rows}
    out = ["  " + f"{'op':16s}" + "".join(f"{d:>10s}" for d in dtypes)]
    for op in ops:
        cells = [_cell(by[(op, d)]) if (op, d) in by else ("" if (op, "-") not in by else "") for d in dtypes]
        if (op, "-") in by:
            cells = [_cell(by[(op, "-")])] + [""] * (len(dtypes) - 1)
        out.append("  " + f"{op:16s}" + "".join(f"{c:>10s}" for c in cells))
    if any(r["ok"] is None for r in rows):
        out.append(f"  n/s: not supported by {backend}")
    for r in rows:
        if r["ok"] is False:
            out.append(f"  {r['op']} {r['dtype']} {r['bytes']} B: {r['detail']}")
    return out


def bandwidth_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = [f"  {'op':16s}{'size':>10s}{'time us':>12s}{'algbw GB/s':>12s}{'busbw GB/s':>12s}  slowest rank"]
    for b in rows:
        if b.get("algbw_gbps") is None:
            out.append(
                f"  {b['op']:16s}{_size(b['bytes']):>10s}  {'not supported' if b['ok'] is None else 'FAILED'}: "
                f"{b.get('detail', '')[:100]}"
            )
            continue
        out.append(
            f"  {b['op']:16s}{_size(b['bytes']):>10s}{b['time_us']:>12.1f}{b['algbw_gbps']:>12.3f}"
            f"{b['busbw_gbps']:>12.3f}  {b['slowest_rank']}"
        )
    return out


def finding_lines(fs: list[Finding]) -> list[str]:
    out = []
    for f in fs:
        out.append(f"  [{_MARK.get(f.severity, f.severity)}] {f.id}: {f.message}")
        if f.hint:
            out.append(f"      fix: {f.hint}")
    return out


def text(result: dict[str, Any]) -> str:
    h = result.get("health")
    out: list[str] = []
    if h:
        env = h["environment"]
        out.append(f"ddpdoctor doctor: environment of {env.get('host')}")
        out += environment_lines(env, h.get("skipped", ""))
        ok = sum(1 for r in h["collectives"] if r["ok"])
        ns = sum(1 for r in h["collectives"] if r["ok"] is None)
        if h["collectives"]:
            out.append(
                f"ddpdoctor doctor: collectives on {h['world_size']} ranks ({h['backend']}): {ok}/"
                f"{len(h['collectives']) - ns} correct"
                + (f", {ns} not supported by {h['backend']}" if ns else "")
                + "; sizes that do not divide by the world size, uneven all_to_all splits"
            )
            out += collectives_lines(h["collectives"], h["backend"])
        if h["bandwidth"]:
            out.append(
                f"ddpdoctor doctor: bandwidth ({h['backend']}, {h['world_size']} ranks, float32; algbw = bytes/"
                "time of the slowest rank, busbw as nccl-tests)"
            )
            out += bandwidth_lines(h["bandwidth"])
    return "\n".join(out) + ("\n" if out else "")


def verdict_lines(result: dict[str, Any]) -> str:
    fs = result["findings"]
    out = []
    if fs:
        out.append("ddpdoctor doctor: findings")
        out += finding_lines(fs)
    parts = []
    if result.get("health"):
        parts.append(f"health check in {result['health']['seconds']:.1f} s ({result['health']['run_dir']})")
    if result.get("results") is not None:
        bad = sum(1 for r in result["results"] if not r["ok"])
        parts.append(f"{len(result['results']) - bad}/{len(result['results'])} probes gave their expected verdict")
    out.append(f"ddpdoctor doctor: {result['verdict'].upper()} (exit code {result['exit_code']}); " + "; ".join(parts))
    return "\n".join(out) + "\n"


def _findings_json(fs: list[Finding]) -> list[dict[str, Any]]:
    from ddpdoctor.render.json_report import to_dict

    return to_dict(Report("doctor", "ok", 0, "", tuple(fs)))["findings"]


def to_dict(result: dict[str, Any]) -> dict[str, Any]:
    h = result.get("health") or {}
    return {
        "schema": DOCTOR_SCHEMA,
        "version": DOCTOR_VERSION,
        "verdict": result["verdict"],
        "exit_code": result["exit_code"],
        "run_dir": result["run_dir"],
        "backend": h.get("backend"),
        "world_size": h.get("world_size"),
        "environment": h.get("environment"),
        "collectives": h.get("collectives", []),
        "bandwidth": h.get("bandwidth", []),
        "findings": _findings_json(result["findings"]),
        "results": result.get("results"),
    }


def json_text(result: dict[str, Any]) -> str:
    return json.dumps(to_dict(result), indent=2, default=str) + "\n"


def junit(result: dict[str, Any]) -> str:
    """One test case per check: each environment check, each collective (op, dtype), each bandwidth row,
    each probe. Unsupported collectives are skipped, not passed."""
    suite = ET.Element("testsuite", name="ddpdoctor.doctor")
    counts = {"tests": 0, "failures": 0, "skipped": 0}
    by_id: dict[str, list[Finding]] = {}
    for f in result["findings"]:
        by_id.setdefault(f.id, []).append(f)

    def case(
        cls: str,
        name: str,
        failure: str | None = None,
        skipped: str | None = None,
        seconds: float = 0.0,
        body: str = "",
    ) -> None:
        tc = ET.SubElement(suite, "testcase", classname=f"ddpdoctor.doctor.{cls}", name=name, time=f"{seconds:g}")
        counts["tests"] += 1
        if failure is not None:
            counts["failures"] += 1
            ET.SubElement(tc, "failure", message=failure[:500], type=cls).text = body or failure
        elif skipped is not None:
            counts["skipped"] += 1
            ET.SubElement(tc, "skipped", message=skipped)

    fail_on = result.get("fail_on", "error")

    def env_case(name: str, ids: tuple[str, ...]) -> None:
        bad = [f for i in ids for f in by_id.get(i, []) if severity_rank(f.severity) <= severity_rank(fail_on)]
        case("environment", name, bad[0].message + (f" (fix: {bad[0].hint})" if bad[0].hint else "") if bad else None)

    h = result.get("health")
    if h:
        env_case("torch", (DOCTOR_NO_TORCH,))
        env_case("socket-ifname", (DOCTOR_SOCKET_IFNAME,))
        env_case("master-addr", (DOCTOR_MASTER_ADDR, DOCTOR_PORT_IN_USE, DOCTOR_MASTER_UNREACHABLE))
        env_case("shm", (DOCTOR_SHM_SMALL,))
        env_case("open-files", (DOCTOR_OPEN_FILES,))
        env_case("gpus", (DOCTOR_GPU_ECC,))
        env_case(
            "flight-recorder",
            (
                DOCTOR_FR_OLD_NAME,
                DOCTOR_FR_BUFFER_OFF,
                DOCTOR_FR_DUMP_TMP,
                DOCTOR_FR_HEARTBEAT_TIMEOUT,
                DOCTOR_DEBUG_DETAIL,
            ),
        )
        env_case(
            "launch",
            (
                DOCTOR_LAUNCH_FAILED,
                DOCTOR_INIT_FAILED,
                DOCTOR_WORLD_SIZE_MISMATCH,
                DOCTOR_RANK_MISSING,
                DOCTOR_HANG,
                DOCTOR_RANK_ERROR,
            ),
        )
        if h["world_size"] and len({r.get("host") for r in h["environment"].get("ranks") or []}) > 1:
            env_case("clock-skew", (DOCTOR_CLOCK_SKEW,))
        for r in h["collectives"]:
            name = f"{r['op']} {r['dtype']}" if r["dtype"] != "-" else r["op"]
            if r["ok"] is None:
                case("collectives", name, skipped=r.get("detail") or "not supported", seconds=r["seconds"])
            else:
                case(
                    "collectives",
                    name,
                    None if r["ok"] else f"{name} ({r['bytes']} B): {r['detail']}",
                    seconds=r["seconds"],
                )
        low = {id(f.evidence.get("row")) for f in by_id.get(DOCTOR_LOW_BUSBW, [])}
        for b in h["bandwidth"]:
            name = f"{b['op']} {_size(b['bytes'])}"
            if b.get("algbw_gbps") is None:
                case(
                    "bandwidth",
                    name,
                    None if b["ok"] is None else b.get("detail", "failed"),
                    skipped=b.get("detail") if b["ok"] is None else None,
                )
            else:
                fail = (
                    next(
                        (f.message for f in by_id.get(DOCTOR_LOW_BUSBW, []) if id(f.evidence.get("row")) == id(b)),
                        None,
                    )
                    if low
                    else None
                )
                case("bandwidth", name, fail, seconds=b["time_us"] * 1e-6 * (b.get("iters") or 1))
    for r in result.get("results") or []:
        case(
            "probes",
            r["probe"],
            None if r["ok"] else f"expected {r['expected']}, got {', '.join(r['got']) or 'nothing'}",
            seconds=r["seconds"],
            body=r["run_dir"],
        )
    suite.set("tests", str(counts["tests"]))
    suite.set("failures", str(counts["failures"]))
    suite.set("errors", "0")
    suite.set("skipped", str(counts["skipped"]))
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
