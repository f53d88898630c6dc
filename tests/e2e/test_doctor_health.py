"""`ddpdoctor doctor` as a health check: environment, every collective on every rank, bandwidth, findings."""

from __future__ import annotations

import json
import stat
from xml.etree import ElementTree as ET

import pytest
from helpers import ddpdoctor

OPS = {
    "all_reduce sum",
    "all_reduce max",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "all_to_all",
    "send_recv",
    "barrier",
}


@pytest.mark.extended  # one of the README tier's slowest jobs (stop 57: the tier read 554-562 s)
def test_doctor_health_and_one_probe(tmp_path):
    junit = tmp_path / "doctor.xml"
    out = tmp_path / "doctor.json"
    r = ddpdoctor(
        [
            "doctor",
            "--only",
            "healthy.py",
            "--sizes",
            "64K,256K",
            "--run-dir",
            str(tmp_path / "d"),
            "--json",
            str(out),
            "--junit",
            str(junit),
        ],
        tmp_path,
        json_report=False,
        timeout=300,  # two jobs (the health check, then the probe): a bound for a loaded 2-core host
    )
    assert r.code == 0, r.out + r.err[-3000:]
    assert "Traceback" not in r.err
    rep = json.loads(out.read_text())
    assert (rep["schema"], rep["version"], rep["verdict"], rep["world_size"]) == ("ddpdoctor.doctor", 2, "ok", 2)
    env = rep["environment"]
    assert env["torch"] and env["backends"]["gloo"] is True and "lo" in env["interfaces"]
    assert env["shm"]["total_bytes"] > 0 and env["open_files"]["soft"] > 0
    # every collective, three dtypes, correct on every rank
    assert {c["op"] for c in rep["collectives"]} == OPS
    assert {c["dtype"] for c in rep["collectives"]} == {"float32", "int64", "bfloat16", "-"}
    assert all(c["ok"] for c in rep["collectives"]), [c for c in rep["collectives"] if not c["ok"]]
    # sizes that do not divide by the world size
    assert any(c["bytes"] % (2 * 4) for c in rep["collectives"] if c["dtype"] == "float32")
    # nccl-tests' bus bandwidth definitions, for 2 ranks
    bw = {(b["op"], b["bytes"]): b for b in rep["bandwidth"]}
    assert set(bw) == {
        (op, n) for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast") for n in (64 << 10, 256 << 10)
    }
    for (op, n), b in bw.items():
        assert b["algbw_gbps"] == pytest.approx(n / (b["time_us"] * 1e-6) / 1e9, rel=2e-3)
        factor = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0}[op]
        assert b["busbw_gbps"] == pytest.approx(b["algbw_gbps"] * factor, rel=1e-3, abs=1e-4)
        assert b["slowest_rank"] in (0, 1)
    assert [p["probe"] for p in rep["results"] if p["ok"]] == ["healthy.py"]
    assert not [f for f in rep["findings"] if f["severity"] == "error"]
    # the text report and JUnit: one test case per check
    assert "collectives on 2 ranks (gloo): 22/22 correct" in r.out
    assert "OK (exit code 0)" in r.out
    suite = ET.fromstring(junit.read_text())
    classes = {tc.get("classname").rsplit(".", 1)[1] for tc in suite.findall("testcase")}
    assert classes == {"environment", "collectives", "bandwidth", "probes"}
    assert (
        suite.get("failures") == "0" and int(suite.get("tests")) == 8 + 22 + 8 + 1
    )  # 8 environment checks (flight-recorder added)
    health = tmp_path / "d" / "health"
    assert stat.S_IMODE(health.stat().st_mode) == 0o700
    assert sorted(p.name for p in (health / "ranks").iterdir()) == ["0.json", "1.json"]


def test_missing_socket_interface_is_a_finding_with_a_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuch0")
    r = ddpdoctor(
        ["doctor", "--skip-probes", "--run-dir", str(tmp_path / "d"), "--json", "-"],
        tmp_path,
        json_report=False,
        timeout=60,
    )
    assert r.code == 1, r.err[-2000:]
    assert "Traceback" not in r.err + r.out
    rep = json.loads(r.out)
    f = next(f for f in rep["findings"] if f["id"] == "doctor.socket-ifname")
    assert f["severity"] == "error" and "nosuch0" in f["message"] and "lo" in f["hint"]
