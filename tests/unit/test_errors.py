"""User errors (errors.py): a DdpdoctorError carries its message and an exit code (usage by default), and
the documented exit codes are distinct."""

from __future__ import annotations

import pytest

from ddpdoctor.errors import DdpdoctorError, ExitCode


def test_a_user_error_is_a_usage_error_unless_told_otherwise() -> None:
    with pytest.raises(DdpdoctorError, match="^no such script: train.py$") as exc:
        raise DdpdoctorError("no such script: train.py")
    assert exc.value.exit_code == ExitCode.USAGE == 2
    assert DdpdoctorError("torchrun failed", ExitCode.NOT_RUN).exit_code == 4


def test_the_documented_exit_codes() -> None:
    codes = {k: v for k, v in vars(ExitCode).items() if k.isupper()}
    assert codes == {"OK": 0, "FINDINGS": 1, "USAGE": 2, "HANG": 3, "NOT_RUN": 4, "INTERNAL": 5, "INTERRUPTED": 130}
