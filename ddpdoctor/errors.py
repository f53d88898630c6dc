"""Errors for users carry their exit code; the CLI turns them into one line (memray's pattern). Stdlib only:
every layer may import it."""

from __future__ import annotations


class ExitCode:
    """The documented exit codes (README, docs/cli.md)."""

    OK = 0  # healthy (warnings and notes do not fail a run unless --fail-on asks)
    FINDINGS = 1  # findings of severity error (a crash, a leak, a data mistake)
    USAGE = 2  # usage or bad input: missing script, syntax error, bad option, bad run dir
    HANG = 3  # a hang or a divergence that gloo turned into an error
    NOT_RUN = 4  # could not run: the script ended before init_process_group, torchrun failed
    INTERNAL = 5  # a bug in ddpdoctor
    INTERRUPTED = 130


class DdpdoctorError(Exception):
    """A user's error: one line on stderr and ``exit_code``, never a traceback."""

    def __init__(self, message: str, exit_code: int = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
