"""The click options the commands share and the click command of one run spec: the one builder that the
CLI and ``doctor``'s self-test both use (the self-test parses each probe's options as the command line would).

Stdlib and click only: ``ddpdoctor --help`` must not import torch.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from ddpdoctor.commands import CommandSpec
from ddpdoctor.launch.command import TORCHRUN_OPTIONS


def torchrun_options(f: Callable) -> Callable:
    """The torchrun options every command that launches ranks passes through (launch.options)."""
    for name, typ, help_ in reversed(TORCHRUN_OPTIONS):
        f = click.option(name, type=typ, default=None, help=help_)(f)
    return f


def output_options(f: Callable) -> Callable:
    """--json, --junit, --html and --fail-on: every command that gives a report."""
    f = click.option(
        "--html",
        "html_path",
        type=click.Path(dir_okay=False),
        help="Write the HTML report here too (one self-contained file; every run directory holds report.html).",
    )(f)
    f = click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write a JUnit XML report.")(f)
    f = click.option(
        "--json",
        "json_path",
        type=click.Path(dir_okay=False),
        help="Write the JSON report (docs/json-schema.md); '-' for stdout.",
    )(f)
    f = click.option(
        "--fail-on",
        type=click.Choice(["error", "warning", "note"]),
        default="error",
        show_default=True,
        help="Lowest finding severity that gives a non-zero exit code.",
    )(f)
    return f


def run_options(f: Callable) -> Callable:
    """The options every command that runs a script shares."""
    f = click.argument("script_args", nargs=-1, type=click.UNPROCESSED)(f)
    f = output_options(f)
    f = click.option(
        "--max-time", type=click.FloatRange(min=1), default=None, help="End the run after this many seconds."
    )(f)
    f = click.option(
        "--run-dir", type=click.Path(file_okay=False), help="Where to keep the records (default ./ddpdoctor-runs/...)."
    )(f)
    f = click.option(
        "--launch",
        type=click.Choice(["auto", "torchrun", "spawn"]),
        default="auto",
        show_default=True,
        help="spawn: the script starts its own ranks with torch.multiprocessing.spawn; auto detects it.",
    )(f)
    f = click.option(
        "--timeout",
        type=click.FloatRange(min=0.5),
        default=60.0,
        show_default=True,
        help="Seconds a rank may wait in a collective while another is still busy before it is called "
        "a hang. Certain deadlocks are reported within seconds whatever this is.",
    )(f)
    f = torchrun_options(f)
    f = click.option(
        "--job-store",
        metavar="HOST:PORT",
        default=None,
        help="Multi-node: where the nodes' ddpdoctors share their ranks (docs/multinode.md), the same on every "
        "node; the ddpdoctor on HOST serves it. Default: $DDPDOCTOR_JOB_STORE, else the rendezvous port + 1.",
    )(f)
    f = click.option(
        "--script", type=click.Path(dir_okay=False), help="The training script. Default: the built-in healthy probe."
    )(f)
    return f


def run_command(spec: CommandSpec) -> click.Command:
    """The click command of one spec: the options every run shares, then the spec's own."""

    def callback(**params: Any) -> None:
        from ddpdoctor.launch.command import run_params

        sys.exit(run_params(spec, params).exit_code)

    for opt in reversed(spec.options):
        callback = click.option(*opt.decls, **opt.kwargs)(callback)
    callback.__doc__ = spec.help
    return click.command(name=spec.name)(run_options(callback))
