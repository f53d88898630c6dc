"""``ddpdoctor profile``'s spec (commands/profile.py): the probe settings (bucket ranges on with --nsys),
the stop rule, and the nsys wrapper: its command line, a refusal when nsys is missing, and a bad
--nsys-args string refused."""

from __future__ import annotations

import shutil

import pytest

from ddpdoctor.commands import Stop
from ddpdoctor.commands.profile import SPEC
from ddpdoctor.errors import DdpdoctorError, ExitCode


def test_bucket_ranges_follow_the_flag_or_nsys() -> None:
    assert SPEC.settings({}) == {"profile": {"nsys": False, "bucket_ranges": False}}
    assert SPEC.settings({"bucket_ranges": True}) == {"profile": {"nsys": False, "bucket_ranges": True}}
    assert SPEC.settings({"use_nsys": True}) == {"profile": {"nsys": True, "bucket_ranges": True}}
    assert SPEC.stop({"steps": 50}) == Stop(steps=50)
    assert SPEC.pictures == ("trace", "html")


def test_without_nsys_no_wrapper() -> None:
    assert SPEC.wrapper({"use_nsys": False, "nsys_args": "--whatever"}) == ()


def test_the_nsys_command_line_with_extra_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/opt/nsys/bin/nsys" if name == "nsys" else None)
    cmd = SPEC.wrapper({"use_nsys": True, "nsys_args": "--sample=none --delay '5'"})
    assert cmd == (
        "/opt/nsys/bin/nsys", "profile", "-t", "cuda,nvtx,osrt", "--force-overwrite", "true",
        "--sample=none", "--delay", "5", "-o", "NSYS_OUTPUT",
    )  # fmt: skip


def test_nsys_missing_is_refused_as_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(DdpdoctorError, match="nsys \\(Nsight Systems\\) is not on PATH") as exc:
        SPEC.wrapper({"use_nsys": True})
    assert exc.value.exit_code == ExitCode.NOT_RUN


def test_unbalanced_quotes_in_nsys_args_are_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nsys")
    with pytest.raises(DdpdoctorError, match="--nsys-args: No closing quotation") as exc:
        SPEC.wrapper({"use_nsys": True, "nsys_args": "--delay '5"})
    assert exc.value.exit_code == ExitCode.USAGE
