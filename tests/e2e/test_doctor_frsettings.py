"""`ddpdoctor doctor`'s check of the flight-recorder / NCCL watchdog settings people get wrong."""

from __future__ import annotations

import json

from helpers import ddpdoctor


def test_doctor_reports_them(tmp_path):
    env = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "100",
        "TORCH_FR_BUFFER_SIZE": "200",
        "TORCH_FR_DUMP_TEMP_FILE": "/tmp/fr-doctor-test-nonexistent/rank_",
    }
    r = ddpdoctor(
        ["doctor", "--skip-probes", "--sizes", "64K", "--run-dir", str(tmp_path / "d"), "--json", "-"],
        tmp_path,
        json_report=False,
        timeout=120,
        env=env,
    )
    assert "Traceback" not in r.err + r.out
    rep = json.loads(r.out)
    got = {(f["id"], f["severity"]) for f in rep["findings"]}
    assert ("doctor.fr-old-name", "warning") in got and ("doctor.fr-dump-tmp", "error") in got, got
    assert r.code == 1
