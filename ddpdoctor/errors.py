"""Errors for users carry their exit code; the CLI turns them into one line (memray's pattern)."""

from __future__ import annotations

from ddpdoctor.analysis.findings import ExitCode


class DdpdoctorError(Exception):
    def __init__(self, message: str, exit_code: int = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
