"""A rank's probe in-process (rank/probe.py), never started: a heartbeat names the main thread's user
line, its steps and the works still pending; a dump request in control/ is answered once with every
thread's stack; finish writes the end record; the counters file stays valid JSON as it is updated in
place and the reader reads it; the ring sizes come from the manifest (at least 16)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import fakeprobe
import pytest

from ddpdoctor.rank import failures
from ddpdoctor.rank.hooks import RankProbe
from ddpdoctor.record import schema
from ddpdoctor.record.reader import load_run


class PendingWork:
    def is_completed(self) -> bool:
        return False


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(failures, "_said", set())
    p = fakeprobe.make_probe(tmp_path, {"hb_ring": 20})
    yield p
    fakeprobe.close(p)


def test_a_heartbeat_names_this_line_and_the_pending_work(probe: Any) -> None:
    probe.ddp_fwd = 7
    probe.works.add(PendingWork(), "isend", "0", 4, [[2]], ["float32"], ["/w/t.py", 3, "f"], 10.0, peer=1)
    probe.tick()  # the beat
    line = sys._getframe().f_lineno - 1
    (hb,) = fakeprobe.records(probe, schema.HEARTBEAT)
    assert (
        hb["kind"] == "hb"
        and hb["step"] == 7
        and hb["where"] == [__file__, line, "test_a_heartbeat_names_this_line_and_the_pending_work"]
    )
    assert hb["awaiting"]["op"] == "isend" and hb["awaiting"]["peer"] == 1 and hb["pending"] is None
    assert hb["cpu"] > 0 and hb["final"] is None


def test_the_heartbeat_ring_comes_from_the_manifest(probe: Any) -> None:
    for _ in range(41):
        probe.tick()
    assert probe.hb.seg_lines == 20 and probe.hb.rotations == 2
    assert len(fakeprobe.records(probe, schema.HEARTBEAT)) == 1  # the current segment, after 2 x 20


def test_a_dump_request_is_answered_once(probe: Any) -> None:
    control = Path(probe.control)
    control.parent.mkdir(parents=True, exist_ok=True)
    control.write_text("2")
    probe.tick()
    probe.tick()
    (d,) = fakeprobe.records(probe, schema.STACKS)
    assert d["request"] == 2
    main = next(t for t in d["threads"] if t["main"])
    assert any(f[0] == __file__ for f in main["stack"])


def test_finish_runs_the_probes_finish_and_writes_the_end_record(probe: Any) -> None:
    class Summary(RankProbe):
        family, records = "memleak", "the last census"

        def finish(self) -> None:
            raise RuntimeError("census failed")

    probe.probes = [Summary()]
    probe.ddp_fwd, probe.ncoll = 12, 30
    probe.finish(0, exception=False)
    events = fakeprobe.records(probe, schema.EVENTS)
    assert [e["kind"] for e in events] == ["probe_error", "finish"]
    assert events[0]["where"] == "memleak probe (finish)"
    fin = events[1]
    assert (fin["code"], fin["ddp_fwd"], fin["ncoll"], fin["digest"]) == (0, 12, 30, {})
    assert fakeprobe.records(probe, schema.HEARTBEAT)[-1]["final"] is True


def test_counters_stay_valid_json_as_they_change_in_place(probe: Any) -> None:
    probe.counters.set_ddp_fwd(41)
    probe.counters.set_ended('"0"', 17)
    path = Path(probe.dir) / schema.COUNTERS
    assert json.loads(path.read_text()) == {"v": 1, "kind": "counters", "ddp_fwd": 41, "ended": ["0", 17]}
    probe.counters.set_ended('"' + "g" * 60 + '"', 18)  # a group name too long for its slot
    assert json.loads(path.read_text())["ended"] == [None, 18]
    fakeprobe.close(probe)
    (Path(probe.run_dir) / schema.MANIFEST).write_text(json.dumps({"schema": schema.SCHEMA, "version": schema.VERSION}))
    assert load_run(str(Path(probe.run_dir))).ranks[0].counters["ddp_fwd"] == 41
