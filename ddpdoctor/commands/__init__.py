"""One spec per command that runs a script (memray's command protocol): its name, help, options, the
probe settings it asks the ranks for, its stop rules and the pictures it leaves. The CLI, ``doctor`` and
the launcher read the same spec, so adding a command is one module here plus one line in ``COMMANDS``.

Stdlib and click only: ``ddpdoctor --help`` must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

Values = dict[str, Any]  # the command's own option values, by parameter name


@dataclass(frozen=True)
class Opt:
    """One click option: ``Opt(("--steps",), type=..., help=...)``."""

    decls: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stop:
    """When the monitor ends a healthy run on purpose."""

    steps: int | None = None  # every rank made this many training steps (rank/steps.py)
    epochs: int | None = None  # every rank began this many epochs and one more


def _no_settings(_v: Values) -> dict[str, Any]:
    return {}


def _no_stop(_v: Values) -> Stop:
    return Stop()


def _no_check(_v: Values) -> None:
    return None


def _no_wrapper(_v: Values) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class CommandSpec:
    name: str
    help: str
    options: tuple[Opt, ...] = ()
    # option values -> the probe settings written to the manifest (the rank side installs what is named)
    settings: Callable[[Values], dict[str, Any]] = _no_settings
    stop: Callable[[Values], Stop] = _no_stop
    validate: Callable[[Values], None] = _no_check  # raises DdpdoctorError on a bad combination
    wrapper: Callable[[Values], tuple[str, ...]] = _no_wrapper  # a program each rank runs under (nsys)
    pictures: tuple[str, ...] = ()  # render.pictures names written into the run directory
    # a command that runs several arms of the script (tune, profile --scaling) drives the runs itself:
    # (spec, click parameters) -> Report; None: one run (launch.command.run_params)
    run: Callable[[CommandSpec, Values], Any] | None = None


def _registry() -> dict[str, CommandSpec]:
    from ddpdoctor.commands import check, hang, memleak, profile, tune

    return {s.name: s for s in (hang.SPEC, check.SPEC, memleak.SPEC, profile.SPEC, tune.SPEC)}


COMMANDS: dict[str, CommandSpec] = _registry()


def spec_of(name: str | None) -> CommandSpec | None:
    return COMMANDS.get(str(name)) if name else None
