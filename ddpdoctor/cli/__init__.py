"""The ``ddpdoctor`` command line. Thin: options -> frozen config -> library calls.

``ddpdoctor --help`` and ``ddpdoctor analyze`` never import torch.
"""

from __future__ import annotations

import sys

import click

from ddpdoctor import __version__
from ddpdoctor.cli import analyze, attach, compare, doctor, findings
from ddpdoctor.cli.options import run_command
from ddpdoctor.commands import COMMANDS
from ddpdoctor.errors import DdpdoctorError, ExitCode


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ddpdoctor")
def cli() -> None:
    """Run a PyTorch DDP script under torchrun with probes in every rank, and say what is wrong:
    on which rank, at which line, and what to do.

    \b
    Exit codes: 0 healthy, 1 findings, 2 usage or bad input, 3 hang or divergence,
                4 could not run, 5 internal error, 130 interrupted.
    """


# The commands that run a script are built from their specs (commands.COMMANDS: options, probe settings, stop
# rules, pictures). The others run no script, so they have none of that: each is one click command in its own
# module here (the sibling protocol: a module with one click.Command named after the module).
for _spec in COMMANDS.values():
    cli.add_command(run_command(_spec))
for _tool in (analyze, attach, compare, doctor, findings):
    cli.add_command(getattr(_tool, _tool.__name__.rsplit(".", 1)[1]))


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line and an exit code for every user error. Under SLURM, a command that runs a
    script runs once per node (launch/leader.py: the node's other tasks wait for it and exit with its code)."""
    args = sys.argv[1:] if argv is None else argv
    if next((a for a in args if not a.startswith("-")), None) in COMMANDS:
        import os

        from ddpdoctor.launch.leader import per_node

        with per_node(os.environ, json_path=_json_path(args)):
            _main(argv)
    else:
        _main(argv)


def _json_path(args: list[str]) -> str | None:
    """The ``--json`` of a run command's line, parsed as the command parses it (a follower task under SLURM
    writes the job's report there); None where the line does not parse."""
    name = next(a for a in args if not a.startswith("-"))
    try:
        cmd = cli.commands[name]
        # under the group's context, as the real parse: a command's help option is made once, from the
        # context that first asks for it (the group's gives it -h)
        parent = cli.make_context("ddpdoctor", [name], resilient_parsing=True)
        ctx = cmd.make_context(name, args[args.index(name) + 1 :], parent=parent, resilient_parsing=True)
    except (click.ClickException, KeyError, ValueError):
        return None
    value = ctx.params.get("json_path")
    return str(value) if value else None


def _main(argv: list[str] | None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="ddpdoctor", standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else 0)
    except DdpdoctorError as e:
        click.echo(f"ddpdoctor: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("ddpdoctor: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as e:
        click.echo(f"ddpdoctor: error: {e.format_message()} (see --help)", err=True)
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        click.echo("ddpdoctor: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except Exception:
        import traceback

        traceback.print_exc()
        click.echo("ddpdoctor: internal error (a bug in ddpdoctor; please report the traceback above)", err=True)
        sys.exit(ExitCode.INTERNAL)
