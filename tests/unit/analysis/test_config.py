"""analysis.config.Config: the thresholds the CLI maps its options onto, frozen and with the documented
defaults (the ``--timeout`` and ``--fail-on`` defaults of every command)."""

from __future__ import annotations

import dataclasses

import pytest

from ddpdoctor.analysis.config import Config


def test_the_defaults_are_the_documented_ones():
    c = Config()
    assert (c.timeout, c.settle, c.stale, c.fail_on, c.select, c.ignore) == (60.0, 1.0, 3.0, "error", (), ())


def test_it_is_frozen_and_replace_gives_a_new_one():
    c = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.timeout = 5.0  # type: ignore[misc]
    d = dataclasses.replace(c, timeout=5.0, select=("hang",))
    assert (d.timeout, d.select, c.timeout, c.select) == (5.0, ("hang",), 60.0, ())


def test_equal_settings_are_equal_and_hashable():
    assert Config(timeout=5.0) == Config(timeout=5.0) != Config()
    assert len({Config(), Config(), Config(fail_on="note")}) == 2
