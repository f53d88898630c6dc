"""``ddpdoctor hang``'s spec (commands/hang.py): no options of its own, nothing asked of the ranks, no stop
rule, the HTML report only."""

from __future__ import annotations

from ddpdoctor.commands import COMMANDS, Stop, spec_of
from ddpdoctor.commands.hang import SPEC


def test_hang_asks_the_ranks_for_nothing_and_never_stops_a_run_early() -> None:
    assert SPEC.name == "hang" and COMMANDS["hang"] is SPEC and spec_of("hang") is SPEC
    assert SPEC.options == ()
    assert SPEC.settings({}) == {} and SPEC.stop({}) == Stop() and SPEC.wrapper({}) == ()
    assert SPEC.validate({}) is None
    assert SPEC.pictures == ("html",)


def test_unknown_or_missing_command_names_have_no_spec() -> None:
    assert spec_of("nope") is None and spec_of(None) is None and spec_of("") is None
