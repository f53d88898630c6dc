"""``ddpdoctor memleak``'s spec (commands/memleak.py): census and snapshot settings for the ranks, the
step stop rule, and the memory picture with the HTML report."""

from __future__ import annotations

from ddpdoctor.commands import Stop
from ddpdoctor.commands.memleak import SPEC


def test_settings_carry_the_census_period_and_the_snapshot_flag() -> None:
    assert SPEC.settings({"census_every": 7, "snapshot": True}) == {"memleak": {"census_every": 7, "snapshot": True}}
    assert SPEC.settings({}) == {"memleak": {"census_every": None, "snapshot": None}}


def test_stop_after_steps_and_its_pictures() -> None:
    assert SPEC.stop({"steps": 200}) == Stop(steps=200) and SPEC.stop({}) == Stop()
    assert SPEC.pictures == ("memory", "html")
    assert [o.decls[0] for o in SPEC.options] == ["--steps", "--census-every", "--snapshot"]
    assert SPEC.validate({"steps": 1, "snapshot": True}) is None
