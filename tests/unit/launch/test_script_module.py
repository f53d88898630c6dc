"""launch.script.module_path: the file ``python -m NAME`` runs, found without running the package's code."""

from __future__ import annotations

import pytest

from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.launch.script import module_path


def test_a_module_a_package_main_and_a_missing_one(tmp_path):
    pkg = tmp_path / "mypkg"
    (pkg / "sub").mkdir(parents=True)
    # the package's __init__ would fail if it ran: finding the module must not run it
    (pkg / "__init__.py").write_text("raise RuntimeError('ran')\n")
    (pkg / "train.py").write_text("print('train')\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "__main__.py").write_text("print('main')\n")
    assert module_path("mypkg.train", str(tmp_path)) == str(pkg / "train.py")
    assert module_path("mypkg.sub", str(tmp_path)) == str(pkg / "sub" / "__main__.py")
    with pytest.raises(DdpdoctorError) as e:
        module_path("mypkg.nope", str(tmp_path))
    assert "no module of that name" in str(e.value)
    with pytest.raises(DdpdoctorError) as e:
        module_path("mypkg", str(tmp_path))
    assert "without a __main__" in str(e.value)
    with pytest.raises(DdpdoctorError):
        module_path("not a name", str(tmp_path))
