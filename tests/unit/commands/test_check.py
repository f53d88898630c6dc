"""``ddpdoctor check``'s spec (commands/check.py): its options as click parses them, the fingerprint
setting, the stop rule, and the refusal of --steps with --epochs."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from ddpdoctor.commands import Stop
from ddpdoctor.commands.check import SPEC
from ddpdoctor.errors import DdpdoctorError, ExitCode


def _parse(args: list[str]) -> dict:
    """The option values click gives for ``args`` (the CLI builds its options from the same Opt list)."""
    got: dict = {}
    cmd = click.Command(
        "check",
        params=[click.Option(list(o.decls), **o.kwargs) for o in SPEC.options],
        callback=lambda **v: got.update(v),
    )
    res = CliRunner().invoke(cmd, args, standalone_mode=False, catch_exceptions=True)
    if res.exception:
        raise res.exception
    return got


def test_options_parse_and_reach_the_settings_and_the_stop_rule() -> None:
    v = _parse(["--epochs", "2", "--fingerprint-every", "5"])
    assert v == {"steps": None, "epochs": 2, "fingerprint_every": 5}
    assert SPEC.settings(v) == {"check": {"every": 5}}
    assert SPEC.stop(v) == Stop(steps=None, epochs=2)
    assert SPEC.settings(_parse([])) == {"check": {"every": None}} and SPEC.stop(_parse([])) == Stop()


def test_zero_steps_is_refused_by_the_option() -> None:
    with pytest.raises(click.BadParameter, match="0 is not in the range x>=1"):
        _parse(["--steps", "0"])


def test_steps_and_epochs_together_are_refused_as_a_usage_error() -> None:
    SPEC.validate({"steps": 10})
    SPEC.validate({"epochs": 1})
    with pytest.raises(DdpdoctorError, match="give --steps or --epochs, not both") as exc:
        SPEC.validate({"steps": 10, "epochs": 1})
    assert exc.value.exit_code == ExitCode.USAGE
    assert SPEC.pictures == ("html",)
