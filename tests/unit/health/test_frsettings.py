"""`ddpdoctor doctor`'s check of the flight-recorder / NCCL watchdog settings people get wrong."""

from __future__ import annotations

from ddpdoctor.health import frsettings


def test_clean_environment_has_no_findings():
    assert frsettings.findings(frsettings.collect({})) == []


def test_old_and_new_buffer_names():
    fs = frsettings.findings(
        frsettings.collect(
            {
                "TORCH_NCCL_TRACE_BUFFER_SIZE": "100",
                "TORCH_FR_BUFFER_SIZE": "2000",
                "TORCH_FR_DUMP_TEMP_FILE": "/nonexistent-dir/x/rank_",
            }
        )
    )
    old = next(f for f in fs if f.id == "doctor.fr-old-name")
    assert old.severity == "warning" and "ignores TORCH_NCCL_TRACE_BUFFER_SIZE" in old.message
    missing = [f for f in fs if f.id == "doctor.fr-dump-tmp"]
    assert [f.severity for f in missing] == ["error"] and "does not exist" in missing[0].message
    only_old = frsettings.findings(frsettings.collect({"TORCH_NCCL_TRACE_BUFFER_SIZE": "100"}))
    assert [(f.id, f.severity) for f in only_old if f.id == "doctor.fr-old-name"] == [("doctor.fr-old-name", "note")]


def test_dumps_to_tmp_heartbeat_and_detail(tmp_path):
    fs = frsettings.findings(
        frsettings.collect(
            {
                "TORCH_FR_BUFFER_SIZE": "2000",
                "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "20",
                "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "60000",
                "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
            }
        )
    )
    ids = [f.id for f in fs]
    assert ids.count("doctor.fr-dump-tmp") == 1  # the default prefix /tmp/nccl_trace_rank_
    assert ids.count("doctor.fr-heartbeat-timeout") == 2 and "doctor.debug-detail" in ids
    shared = frsettings.findings(frsettings.collect({"TORCH_FR_DUMP_TEMP_FILE": f"{tmp_path}/rank_"}))
    assert shared == [] or str(tmp_path).startswith("/tmp/")
    off = frsettings.findings(frsettings.collect({"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}))
    assert [f.id for f in off] == ["doctor.fr-buffer-off"]
    mon = frsettings.findings(
        frsettings.collect({"TORCH_NCCL_ENABLE_MONITORING": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"})
    )
    assert "doctor.fr-heartbeat-timeout" in [f.id for f in mon]
