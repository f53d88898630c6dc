"""The pieces of running a command (launch/command.py): torchrun's arguments from the options (standalone
unless multi-node, a bad --nproc-per-node refused), output paths checked before a run, the reports
emitted to files or stdout, and the pictures written into the run directory with a note each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import timelines

from ddpdoctor.analysis.findings import Report
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.launch import command
from ddpdoctor.launch.command import attach_pictures, check_html_path, check_writable, emit, torchrun_args
from ddpdoctor.record.reader import RankRecord, RunRecord


@pytest.fixture(autouse=True)
def no_launcher_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SLURM, PyTorchJob or torchrun variables of the machine running the tests."""
    for k in list(os.environ):
        if k.startswith(("SLURM_", "PET_")) or k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
            monkeypatch.delenv(k)


def test_a_single_node_run_is_standalone() -> None:
    assert torchrun_args({"nproc_per_node": "4"}, spawn=False) == ["--nproc-per-node", "4", "--standalone"]
    assert torchrun_args({"nproc_per_node": "4"}, spawn=True) == ["--nproc-per-node", "1", "--standalone"]


def test_the_default_nproc_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3,5")
    assert torchrun_args({}, spawn=False)[:2] == ["--nproc-per-node", "3"]


def test_multi_node_options_are_passed_and_standalone_dropped() -> None:
    args = torchrun_args(
        {"nproc_per_node": "2", "nnodes": "2", "node_rank": 1, "master_addr": "n0", "master_port": 29500}, False
    )
    assert args == [
        "--nproc-per-node",
        "2",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "n0",
        "--master-port",
        "29500",
    ]


@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_a_bad_nproc_is_refused(bad: str) -> None:
    with pytest.raises(
        DdpdoctorError, match=f"--nproc-per-node must be a number of at least 1, or auto/cpu/gpu \\(got {bad}\\)"
    ):
        torchrun_args({"nproc_per_node": bad}, spawn=False)


def test_output_paths_are_checked_before_the_run(tmp_path: Path) -> None:
    check_writable(str(tmp_path / "report.json"))
    check_writable("-")
    with pytest.raises(DdpdoctorError, match="folder missing or not writable"):
        check_writable(str(tmp_path / "missing" / "report.json"))
    with pytest.raises(DdpdoctorError, match="--html needs a file name"):
        check_html_path("-")


def test_emit_writes_the_text_and_the_requested_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    report = Report("check", "ok", 0, "/run")
    emit(report, str(tmp_path / "r.json"), str(tmp_path / "r.xml"))
    out = capsys.readouterr()
    assert out.out.startswith("ddpdoctor check: OK (exit code 0)") and out.err == ""
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "ok"
    assert (tmp_path / "r.xml").read_text().startswith("<?xml")
    emit(report, "-", None)  # JSON to stdout: the text report moves to stderr
    out = capsys.readouterr()
    assert json.loads(out.out)["schema"] == "ddpdoctor.report" and out.err.startswith("ddpdoctor check: OK")


def test_pictures_are_written_into_the_run_directory_with_a_note_each(tmp_path: Path) -> None:
    mem = [{"kind": "mem", "step": s, "rss": 2**20 * s} for s in range(1, 6)]
    rec = RunRecord(str(tmp_path), {}, {0: RankRecord(0, memory=mem, timeline=timelines.steps(3))}, [])
    html = tmp_path / "out.html"
    report = attach_pictures(Report("memleak", "ok", 0, str(tmp_path)), rec, ("memory", "trace", "html"), str(html))
    assert report.notes == (
        f"memory per rank per step: {tmp_path / 'memory.svg'}",
        "no CUDA figures: no rank used a GPU (CPU RSS, live tensors and autograd graphs only)",
        f"timeline (open in https://ui.perfetto.dev): {tmp_path / 'trace.json'}",
        f"report to open in a browser: {tmp_path / 'report.html'}",
        f"HTML report: {html}",
    )
    assert (tmp_path / "memory.svg").read_text().startswith("<svg")
    assert oct(os.stat(tmp_path / "trace.json").st_mode & 0o777) == "0o600"
    # report.html lists the notes of the pictures before it
    assert "memory.svg" in (tmp_path / "report.html").read_text()


def test_a_picture_that_cannot_be_written_is_a_note_not_an_error(tmp_path: Path) -> None:
    rec = RunRecord(str(tmp_path / "gone"), {}, {0: RankRecord(0, timeline=timelines.steps(2))}, [])
    report = attach_pictures(Report("profile", "ok", 0, "/r"), rec, ("trace",))
    assert report.notes == (f"could not write {tmp_path / 'gone' / 'trace.json'}: No such file or directory",)
    assert command.probe_path("x.py").endswith(os.path.join("probes", "x.py"))


@pytest.mark.parametrize(
    "args, words",
    [
        (("bash", {"nproc_per_node": "2"}, "auto", (), True), "--nproc-per-node: with your own launch command"),
        (("bash", {}, "spawn", (), True), "--launch spawn: with your own launch command"),
        (("bash", {}, "auto", ("nsys", "profile"), True), "nsys: with your own launch command"),
        (("./x.sh", {"module": True}, "auto", (), False), "--no-python and -m"),
        (("no-such-program-xyz", {}, "auto", (), True), "no-such-program-xyz: no such program"),
    ],
)
def test_the_launcher_form_refuses_what_it_cannot_honour_in_one_line(args, words) -> None:
    with pytest.raises(DdpdoctorError) as e:
        command.check_launcher(*args)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_launcher_form_takes_a_program_on_path() -> None:
    command.check_launcher("bash", {"nproc_per_node": None, "standalone": False}, "auto", (), True)
