"""The click options the commands share and the click command of one run spec: the one builder that the
CLI and ``doctor``'s self-test both use (the self-test parses each probe's options as the command line would).
``--help`` is in groups: the command's own options, then torchrun's, then the report's (``GroupedCommand``).

Stdlib and click only: ``ddpdoctor --help`` must not import torch.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from ddpdoctor.commands import CommandSpec
from ddpdoctor.launch.torchrun_options import PASSED, TORCHRUN_OPTIONS

TORCHRUN_TITLE = "torchrun options"
OUTPUT_TITLE = "Output options"
# parameter name -> its --help group; the others are the command's own ("Options", first)
_GROUP = {
    **{o.key: TORCHRUN_TITLE for o in TORCHRUN_OPTIONS},
    "job_store": TORCHRUN_TITLE,
    **dict.fromkeys(("json_path", "junit_path", "html_path", "fail_on", "select", "ignore", "verbose"), OUTPUT_TITLE),
}


# the options every run shares, listed after a command's own
_SHARED = {"script", "probe", "timeout", "launch", "max_time", "run_dir"}


class GroupedCommand(click.Command):
    """A click command whose ``--help`` lists its options in groups: its own first (those of its spec before
    the ones every run shares, ``-h, --help`` last), then torchrun's, then the report's."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The options, one section per group."""
        groups: dict[str, list[tuple[str, str]]] = {"Options": [], TORCHRUN_TITLE: [], OUTPUT_TITLE: []}
        params = [p for p in self.get_params(ctx) if isinstance(p, click.Option)]
        helper = self.get_help_option(ctx)
        params.sort(key=lambda p: (p is helper, p.name in _SHARED))  # stable: each group keeps its order
        for p in params:
            rec = p.get_help_record(ctx)
            if rec is not None:
                groups[_GROUP.get(p.name or "", "Options")].append(rec)
        for title, rows in groups.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows, col_max=32)  # --nproc-per-node N|auto|cpu|gpu on its line


# the values click converts; the rest are torchrun's strings (``--nnodes 1:4``, ``--nproc-per-node auto``)
_TYPES: dict[str, Any] = {
    "node_rank": click.IntRange(min=0),
    "master_port": click.IntRange(1, 65535),
    "max_restarts": click.IntRange(min=0),
    "monitor_interval": click.FloatRange(min=0, min_open=True),
    "shutdown_timeout": click.IntRange(min=0),
}


class _SpelledOption(click.Option):
    """A torchrun option: both spellings parse (``--nproc-per-node``, ``--nproc_per_node``), ``--help`` shows
    the ``-`` one."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        """The help line without the ``_`` spellings."""
        opts = self.opts
        try:
            self.opts = [o for o in opts if "_" not in o] or opts
            return super().get_help_record(ctx)
        finally:
            self.opts = opts


def torchrun_options(f: Callable, passed_only: bool = False) -> Callable:
    """torchrun's options (launch/torchrun_options.py), both spellings of each: every one for a command that
    runs a script; ``passed_only``: those handed to torchrun as they are (``doctor`` runs its own worker)."""
    for o in reversed(TORCHRUN_OPTIONS):
        if passed_only and o.key not in PASSED:
            continue
        if o.flag:
            f = click.option(*o.names, o.key, cls=_SpelledOption, is_flag=True, default=None, help=o.help)(f)
        else:
            kw = dict(type=_TYPES.get(o.key, str), metavar=o.metavar, default=None, help=o.help)
            f = click.option(*o.names, o.key, cls=_SpelledOption, **kw)(f)
    return f


def passed_torchrun_options(f: Callable) -> Callable:
    """The torchrun options handed to torchrun as they are (``doctor``, which runs its own worker)."""
    return torchrun_options(f, passed_only=True)


def output_options(f: Callable) -> Callable:
    """--json, --junit, --html, --fail-on, --select and --ignore: every command that gives a report."""
    f = click.option("--ignore", multiple=True, metavar="ID", help="Leave out this finding id or family (repeatable).")(
        f
    )
    f = click.option(
        "--select", multiple=True, metavar="ID", help="Report only these finding ids or families.  [default: all]"
    )(f)
    f = click.option(
        "--html", "html_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the HTML report here too."
    )(f)
    f = click.option(
        "--junit", "junit_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write a JUnit XML report."
    )(f)
    f = click.option(
        "--json",
        "json_path",
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="Write the JSON report ('-': stdout).",
    )(f)
    f = click.option(
        "--fail-on",
        type=click.Choice(["error", "warning", "note"]),
        default="error",
        show_default=True,
        help="Lowest severity that exits non-zero.",
    )(f)
    return f


def probe_names() -> list[str]:
    """The built-in probes (``probes/*.py``) by name, for ``--probe NAME``; read from the folder, not imported."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("ddpdoctor.probes")
    folders = list(spec.submodule_search_locations or ()) if spec else []
    names = {n[:-3] for d in folders for n in os.listdir(d) if n.endswith(".py") and not n.startswith("_")}
    return sorted(names)


def run_options(f: Callable) -> Callable:
    """The options every command that runs a script shares."""
    f = click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="SCRIPT [ARGS]...")(f)
    f = output_options(f)
    f = click.option(
        "--verbose",
        is_flag=True,
        default=False,
        help="Multi-node: print the job's report on every node.",
    )(f)
    f = click.option(
        "--job-store",
        metavar="HOST:PORT",
        default=None,
        help="Multi-node: where the nodes' ddpdoctors meet.",
    )(f)
    f = torchrun_options(f)
    f = click.option(
        "--run-dir",
        type=click.Path(file_okay=False),
        metavar="DIR",
        help="Where to keep the records.  [default: ./ddpdoctor-runs/CMD-TIME]",
    )(f)
    f = click.option(
        "--max-time", type=click.FloatRange(min=1), metavar="S", default=None, help="End the run after S seconds."
    )(f)
    f = click.option(
        "--launch",
        type=click.Choice(["auto", "torchrun", "spawn"]),
        default="auto",
        show_default=True,
        help="spawn: the script spawns its own ranks.",
    )(f)
    f = click.option(
        "--timeout",
        type=click.FloatRange(min=0.5),
        metavar="S",
        default=60.0,
        show_default=True,
        help="Uncertain waits over S s are hangs.",
    )(f)
    f = click.option(
        "--probe",
        type=click.Choice(probe_names()),
        metavar="NAME",  # the 30 names are in the error of a wrong one
        default=None,
        help="Run a built-in probe instead of a script, e.g. healthy.",
    )(f)
    f = click.option(
        "--script",
        metavar="SCRIPT",
        help="The script; its own arguments after --.",
    )(f)
    return f


def _value_options(cmd: click.Command) -> tuple[set[str], set[str]]:
    """The command's option names: those that take a value, and all of them."""
    takes, names = set(), set()
    for p in cmd.params:
        if isinstance(p, click.Option):
            for n in (*p.opts, *p.secondary_opts):
                names.add(n)
                if not p.is_flag and not p.count:
                    takes.add(n)
    return takes, names


def _option_names_in(tokens: list[str], names: set[str]) -> list[str]:
    """The tokens (``--json`` or ``--json=F``) that are also ddpdoctor's option names, each once, in order."""
    seen: list[str] = []
    for tok in tokens:
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok
        if name in names and name not in seen:
            seen.append(name)
    return seen


def _split(cmd: click.Command, args: list[str]) -> tuple[list[str], str | None, list[str], bool]:
    """ddpdoctor's own options, ``--script``'s value, the rest (the script and its arguments, or the launch
    command), and whether that rest came after ``--``."""
    takes, _names = _value_options(cmd)
    own: list[str] = []
    script: str | None = None
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            return own, script, args[i + 1 :], True
        if tok == "--script" and i + 1 < len(args):
            script, i = args[i + 1], i + 2
            continue
        if tok.startswith("--script="):
            script, i = tok.split("=", 1)[1], i + 1
            continue
        if tok.startswith("-") and tok != "-":
            n = 2 if tok in takes else 1  # ``--json=F`` is one token whatever the option
            own += args[i : i + n]
            i += n
            continue
        return own, script, args[i:], False  # the first positional
    return own, script, [], False


# ddpdoctor's options that make the word after ``--`` a script or a probe's argument, never a launch command
_NOT_A_COMMAND = ("-m", "--module", "--probe", "--no-python", "--no_python")


def launcher_form(cmd: click.Command, args: list[str]) -> bool:
    """The command line is ``ddpdoctor CMD [OPTIONS] -- COMMAND...`` with the user's own launch command
    (``accelerate launch ...``, ``bash run.sh``): the first word after ``--`` is not a ``.py`` file (nor a
    file that cannot be executed: a script without the ending), and neither ``--script``, ``-m``, ``--probe``
    nor ``--no-python`` says what it is (py-spy's convention)."""
    import os

    own, script, tail, dashes = _split(cmd, args)
    if not dashes or script is not None or not tail or tail[0].endswith(".py"):
        return False
    if os.path.isfile(tail[0]) and not os.access(tail[0], os.X_OK):
        return False  # a script without the .py ending, which no program runs: the script, as before
    return not any(t.split("=", 1)[0] in _NOT_A_COMMAND for t in own)


def script_form(cmd: click.Command, args: list[str]) -> tuple[list[str], list[str]]:
    """The command line in the one form click parses: ddpdoctor's options, then ``--``, the script and the
    script's arguments; and the tokens after the script that are also ddpdoctor's option names (the caller
    says so, once: they are the script's and are passed on). The rules (docs/cli.md):

    - ``--script S`` is an option like any other, in any position among ddpdoctor's options
      (``check --script t.py --epochs 3`` gives check its ``--epochs``); the script's own arguments follow
      ``--``, or the first positional;
    - without it, the first positional, or the first word after ``--``, is the script, and everything after
      it is the script's (torchrun's rule);
    - a launch command after ``--`` (launcher_form) is the user's whole: nothing in it is noted.
    """
    _takes, names = _value_options(cmd)
    own, script, tail, _dashes = _split(cmd, args)
    if launcher_form(cmd, args):
        return [*own, "--", *tail], []
    if script is None:
        # the script is tail[0] (with --probe NAME every positional is the probe's argument); an option in its
        # place (``-- --json F``) is click's to refuse
        probe = any(t == "--probe" or t.startswith("--probe=") for t in own)
        return own + ["--", *tail] if tail else own, _option_names_in(tail if probe else tail[1:], names)
    return [*own, "--", script, *tail], _option_names_in(tail, names)


class RunCommand(GroupedCommand):
    """A command that runs a script, parsed by torchrun's rule: ddpdoctor's options, then the script, then
    the script's arguments (``ddpdoctor hang train.py --epochs 3``: ``--epochs 3`` is train.py's);
    ``--script S`` anywhere among ddpdoctor's options, the script's arguments after ``--`` (script_form)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Click's parsing of the one form script_form gives; the tokens after the script that are also
        ddpdoctor's option names are kept for the callback to say so."""
        form, passed_on = script_form(self, list(args))
        ctx.meta["ddpdoctor.passed_on"] = passed_on
        ctx.meta["ddpdoctor.launcher"] = launcher_form(self, list(args))
        try:
            return super().parse_args(ctx, form)
        except click.NoSuchOption as e:
            # not one of ddpdoctor's: most likely the script's, given where ddpdoctor's options go
            where = ": the script's own options go after the script (after -- where --script names it)"
            raise click.NoSuchOption(e.option_name, e.message.rstrip(".") + where, e.possibilities, e.ctx) from None


def passed_on_line(script: str, passed_on: list[str]) -> str | None:
    """The one line that says which of ddpdoctor's option names after the script (or among a --probe's
    arguments) were passed on to it."""
    if not passed_on:
        return None
    names = ", ".join(passed_on)
    return (
        f"ddpdoctor: note: {names} after the script {script} {'is' if len(passed_on) == 1 else 'are'} the "
        "script's (torchrun's rule) and passed on to it; for ddpdoctor, put them before the script, or use "
        f"--script {script} OPTIONS -- SCRIPT_ARGS"
    )


def run_command(spec: CommandSpec) -> click.Command:
    """The click command of one spec: the options every run shares, then the spec's own."""

    def callback(**params: Any) -> None:
        from ddpdoctor.cli.project import selection
        from ddpdoctor.launch.command import run_params

        passed_on = click.get_current_context().meta.get("ddpdoctor.passed_on") or []
        script_args = params.get("script_args") or ()
        if line := passed_on_line(str(params.get("script") or (script_args[:1] or ["the script"])[0]), passed_on):
            click.echo(line, err=True)  # once per run: the options are the script's, and passed on to it

        # the project's [tool.ddpdoctor] here, not in run_params: doctor's self-test must not take it
        params["select"], params["ignore"] = selection(params.get("select", ()), params.get("ignore", ()))
        params["launch_command"] = bool(click.get_current_context().meta.get("ddpdoctor.launcher"))
        sys.exit((spec.run or run_params)(spec, params).exit_code)

    for opt in reversed(spec.options):
        callback = click.option(*opt.decls, **opt.kwargs)(callback)
    callback.__doc__ = spec.help
    return click.command(
        name=spec.name,
        cls=RunCommand,
        short_help=spec.help.strip().splitlines()[0],
        context_settings={"allow_interspersed_args": False},
    )(run_options(callback))
