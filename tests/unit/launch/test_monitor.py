"""The monitor's pure parts (launch/monitor.py; the run loop itself wires processes and is tested end to
end): torchrun's command line with and without a wrapper program, worker lines told from torchrun's own
log, and epochs counted from the busiest DataLoader line so a peek or a validation loader does not count."""

from __future__ import annotations

import io
import sys

from ddpdoctor.launch.monitor import LaunchSpec, _epochs, _forward, torchrun_cmd


def test_torchrun_runs_each_rank_under_ddpdoctor() -> None:
    spec = LaunchSpec("/w/train.py", ("--lr", "1"), ("--nproc-per-node", "2", "--standalone"), "torchrun")
    assert torchrun_cmd(spec, "/run") == [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
        "--log-dir", "/run/logs", "--tee", "3", "-m", "ddpdoctor.rank", "/run", "/w/train.py", "--lr", "1",
    ]  # fmt: skip
    nsys = LaunchSpec("/w/t.py", (), ("--nproc-per-node", "1"), "torchrun", wrapper=("nsys", "profile", "-o", "X"))
    cmd = torchrun_cmd(nsys, "/run")
    i = cmd.index("--no-python")
    assert cmd[i + 1 : i + 5] == ["nsys", "profile", "-o", "X"]
    assert cmd[i + 5 :] == [sys.executable, "-u", "-m", "ddpdoctor.rank", "/run", "/w/t.py"]


def test_worker_lines_go_to_the_terminal_and_torchruns_to_its_log() -> None:
    pipe = io.BytesIO(b"[default0]:epoch 1 loss 0.5\nW1203 agent: sending SIGTERM\n[default1]:done\n")
    out, log = io.BytesIO(), io.BytesIO()
    _forward(pipe, out, log)
    assert out.getvalue() == b"[default0]:epoch 1 loss 0.5\n[default1]:done\n"
    assert log.getvalue() == b"W1203 agent: sending SIGTERM\n"


def test_epochs_are_counted_from_the_busiest_loader_line() -> None:
    def dl(line: int) -> dict:
        return {"kind": "dataloader", "site": ["/w/train.py", line, "main"]}

    events = [dl(10), dl(30), dl(40), dl(30), dl(40), dl(30), {"kind": "start"}]  # a peek at 10, val at 40
    assert _epochs(events) == 3 and _epochs([]) == 0


def test_the_monitor_follows_the_newest_attempt_and_counts_the_restarts_left(tmp_path) -> None:
    # imported here: the module's import line is shared with the torchrun command's tests
    from types import SimpleNamespace

    from ddpdoctor.launch.monitor import Attempts, attempt_text

    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    follow = Attempts(str(run), ("--nproc-per-node", "2", "--max-restarts", "3"))
    assert (follow.max, follow.current, follow.left()) == (3, 0, 3) and follow.newer() is None
    for k in (1, 2):  # torchrun restarted twice between two polls: the newest is followed
        (run / "attempts" / str(k)).mkdir()
        (run / "attempts" / str(k) / "manifest.json").write_text("{}")
    assert follow.newer() == 2 and follow.newer() is None and follow.left() == 1
    assert Attempts(str(run), ("--standalone",)).newer() is None  # no --max-restarts: no attempt is looked for
    record = SimpleNamespace(manifest={"attempt": 2, "torchrun_args": ["--max-restarts", "3"]})
    assert attempt_text(record) == "attempt 2 (restart 2 of 3)"
    assert attempt_text(SimpleNamespace(manifest={})) == ""


def test_the_launcher_form_starts_the_users_command_or_torchrun_no_python() -> None:
    """The launcher form runs the user's command as it is; --no-python runs the user's program in each rank
    under torchrun, with the run directory's logs as for any torchrun run."""
    own = LaunchSpec("accelerate", ("launch", "t.py"), (), "launcher")
    assert torchrun_cmd(own, "/run") == ["accelerate", "launch", "t.py"]
    nopy = LaunchSpec("./rank.sh", ("a",), ("--nproc-per-node", "2"), "launcher")
    cmd = torchrun_cmd(nopy, "/run")
    assert cmd[cmd.index("--tee") :] == ["--tee", "3", "--no-python", "./rank.sh", "a"]


def test_a_launch_commands_lines_all_reach_the_terminal_until_the_monitor_ends_it() -> None:
    import threading

    ending = threading.Event()
    out, log = io.BytesIO(), io.BytesIO()
    _forward(io.BytesIO(b"epoch 1\n[default0]:x\n"), out, log, every=ending)
    assert out.getvalue() == log.getvalue() == b"epoch 1\n[default0]:x\n"
    ending.set()
    out2, log2 = io.BytesIO(), io.BytesIO()
    _forward(io.BytesIO(b"Received 15 death signal\n"), out2, log2, every=ending)
    assert (out2.getvalue(), log2.getvalue()) == (b"", b"Received 15 death signal\n")
