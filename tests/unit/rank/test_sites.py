"""rank/sites.py in-process: the user's line is the innermost frame outside torch, ddpdoctor, the standard
library and installed packages; a script's module-level code is its own line, never ``<frozen runpy>``."""

from __future__ import annotations

import json
import os
import runpy
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import ddpdoctor
from ddpdoctor.rank import sites


@pytest.fixture(autouse=True)
def _fresh_prefixes() -> Any:
    sites.reset_prefixes()  # torch is imported: its files are library files
    yield
    sites.reset_prefixes()


def _lineno(path: Path, marker: str) -> int:
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if marker in text:
            return i
    raise AssertionError(f"{marker!r} not in {path}")


def _library_caller(lib_dir: str, name: str) -> Any:
    """A function whose code lives in ``lib_dir`` (as a library's would) and calls its argument."""
    src = "def lib_call(fn):\n    return fn()\n"
    ns: dict[str, Any] = {}
    exec(compile(src, os.path.join(lib_dir, name), "exec"), ns)
    return ns["lib_call"]


def _write_user_module(tmp_path: Path) -> tuple[Path, Any]:
    path = tmp_path / "user_train.py"
    path.write_text(
        textwrap.dedent("""\
        def train_step(lib_call, capture):
            return lib_call(capture)   # USER-LINE
        """)
    )
    ns: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return path, ns["train_step"]


LIB_DIRS = {
    "ddpdoctor": os.path.dirname(os.path.abspath(ddpdoctor.__file__)),
    "torch": os.path.dirname(os.path.abspath(torch.__file__)),
    "stdlib": sysconfig.get_paths()["stdlib"],
    "site-packages": sysconfig.get_paths()["purelib"],
}


@pytest.mark.parametrize("lib", sorted(LIB_DIRS))
def test_library_frames_are_skipped_to_the_users_call(tmp_path: Path, lib: str) -> None:
    path, train_step = _write_user_module(tmp_path)
    lib_call = _library_caller(os.path.join(LIB_DIRS[lib], "somewhere"), "_not_a_real_file.py")
    frames: list = []
    train_step(lib_call, lambda: frames.append(sys._getframe(1)))
    inner = frames[0]
    assert inner.f_code.co_name == "lib_call"  # the innermost frame is the library's
    assert not sites.is_user_file(inner.f_code.co_filename)
    assert sites.user_site(inner) == [str(path), _lineno(path, "USER-LINE"), "train_step"]


def test_real_stdlib_and_torch_frames_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "user_loop.py"
    path.write_text(
        textwrap.dedent("""\
        import json
        import torch.utils._pytree as pytree

        def parse(hook):
            return json.loads('{"a": 1}', object_hook=hook)   # JSON-LINE

        def mapped(fn):
            return pytree.tree_map(fn, [1, (2, 3)])   # TORCH-LINE
        """)
    )
    ns: dict[str, Any] = {"__name__": "user_loop"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    got: list = []
    ns["parse"](lambda d: got.append(sys._getframe(1)) or d)
    ns["mapped"](lambda x: got.append(sys._getframe(1)) or x)
    json_frame, torch_frame = got[0], got[1]
    assert json_frame.f_code.co_filename == json.decoder.__file__
    assert torch_frame.f_code.co_filename.startswith(os.path.dirname(pytree.__file__))
    assert sites.user_site(json_frame) == [str(path), _lineno(path, "JSON-LINE"), "parse"]
    assert sites.user_site(torch_frame) == [str(path), _lineno(path, "TORCH-LINE"), "mapped"]


def test_a_script_run_by_runpy_gives_its_module_level_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""\
        import json
        x = 1
        json.loads('{"b": 2}', object_hook=CAPTURE)   # MODULE-LINE
        """)
    )
    got: list = []
    runpy.run_path(
        str(script), init_globals={"CAPTURE": lambda d: got.append(sys._getframe(1)) or d}, run_name="__main__"
    )
    site = sites.user_site(got[0])
    assert site == [str(script), _lineno(script, "MODULE-LINE"), "<module>"]
    # the frames above the script are runpy's (frozen or not): never the user's
    stack = sites.stack_of(got[0])
    runpy_frames = [f for f in stack if f[0] == "<frozen runpy>" or f[0].endswith(os.sep + "runpy.py")]
    assert runpy_frames, stack
    assert not any(sites.is_user_file(f[0]) for f in runpy_frames)


def test_frozen_and_string_code_is_never_the_users() -> None:
    assert sites.is_user_file("<frozen runpy>") is False
    assert sites.is_user_file("<string>") is False
    assert sites.is_user_file(sys.modules["json"].__file__) is False
    assert sites.is_user_file(torch.__file__) is False
    assert sites.is_user_file(__file__) is True  # the tests' own folder is user code


def test_a_stack_of_only_library_frames_has_no_user_site() -> None:
    import threading

    lib_call = _library_caller(LIB_DIRS["stdlib"], "_not_a_real_file.py")
    got: list = []
    t = threading.Thread(target=lib_call, args=(lambda: got.append(sys._getframe(1)),))
    t.start()
    t.join()
    # lib_call <- threading's bootstrap: no user frame at or above it
    assert got[0].f_code.co_name == "lib_call"
    assert sites.user_site(got[0]) is None
    assert sites.user_site(None) is None


def test_the_scripts_folder_is_the_users_even_inside_site_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    pkg_dir = os.path.join(LIB_DIRS["site-packages"], "ddpdoctor_unit_fake_project")
    script = os.path.join(pkg_dir, "train.py")
    monkeypatch.setattr(sites, "_script_dirs", ())
    assert sites.is_user_file(script) is False
    sites.add_script_dir(script)
    assert sites.is_user_file(script) is True
    assert sites.is_user_file(os.path.join(LIB_DIRS["site-packages"], "other", "x.py")) is False
    lib_call = _library_caller(LIB_DIRS["torch"], "_not_a_real_file.py")
    ns: dict[str, Any] = {}
    exec(compile("def step(lib, fn):\n    return lib(fn)\n", script, "exec"), ns)  # code in the script's folder
    got: list = []
    ns["step"](lib_call, lambda: got.append(sys._getframe(1)))
    assert sites.user_site(got[0]) == [script, 2, "step"]


def test_stack_of_is_outermost_first_and_in_backward_sees_autograd() -> None:
    def inner() -> Any:
        return sys._getframe()

    stack = sites.stack_of(inner())
    assert stack[-1][2] == "inner" and stack[-2][2] == "test_stack_of_is_outermost_first_and_in_backward_sees_autograd"
    seen: list = []
    w = torch.ones(2, requires_grad=True)

    def hook(g: torch.Tensor) -> torch.Tensor:
        seen.append(sites.in_backward(sys._getframe()))
        return g

    w.register_hook(hook)
    (w * 2).sum().backward()
    assert seen == [True]
    assert sites.in_backward(sys._getframe()) is False
