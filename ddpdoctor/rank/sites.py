"""Find the user's line in a Python stack: the innermost frame that is not torch, ddpdoctor, the
standard library or an installed package (Lightning, Accelerate, transformers: a collective called from
``self.all_gather`` or ``accelerator.gather`` is located at the user's call). The script's own folder is
always the user's, even inside site-packages. Cached per file name: one dict lookup per frame."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType

from ddpdoctor.record.paths import is_user_path

_LIB_PREFIXES: tuple[str, ...] = ()
_USER_PREFIXES: tuple[str, ...] = ()  # ddpdoctor's own probes are user scripts
_cache: dict[str, bool] = {}


def _init_prefixes() -> tuple[str, ...]:
    global _USER_PREFIXES
    import ddpdoctor
    import ddpdoctor.probes

    _USER_PREFIXES = (os.path.dirname(os.path.abspath(ddpdoctor.probes.__file__)) + os.sep,) + _script_dirs
    prefixes = {os.path.dirname(os.path.abspath(ddpdoctor.__file__)) + os.sep}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            prefixes.add(os.path.abspath(p) + os.sep)
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None and getattr(torch_mod, "__file__", None):
        prefixes.add(os.path.dirname(os.path.abspath(torch_mod.__file__)) + os.sep)
    return tuple(prefixes)


def is_user_file(filename: str) -> bool:
    """The user's code (record/paths.is_user_path with this process's library folders), cached per file."""
    global _LIB_PREFIXES
    hit = _cache.get(filename)
    if hit is not None:
        return hit
    if not _LIB_PREFIXES:
        _LIB_PREFIXES = _init_prefixes()
    user = is_user_path(filename, _USER_PREFIXES, _LIB_PREFIXES)
    _cache[filename] = user
    return user


_script_dirs: tuple[str, ...] = ()


def add_script_dir(script: str) -> None:
    """The script's folder holds the user's code wherever it lives."""
    global _script_dirs
    d = os.path.dirname(os.path.abspath(script)) + os.sep
    if d not in _script_dirs:
        _script_dirs += (d,)
        reset_prefixes()


def reset_prefixes() -> None:
    """Call once torch is imported so its files count as library files."""
    global _LIB_PREFIXES
    _LIB_PREFIXES = ()
    _cache.clear()
    _lines.clear()


def user_site(frame: FrameType | None) -> list | None:
    """``[file, line, func]`` of the innermost user frame at or above ``frame``."""
    f = frame
    while f is not None:
        code = f.f_code
        if is_user_file(code.co_filename):
            return [code.co_filename, f.f_lineno, code.co_name]
        f = f.f_back
    return None


_lines: dict[tuple, list] = {}  # (code, f_lasti) -> [file, line, func]: user_site_at's call sites
LINES_KEPT = 4096  # call sites remembered (past this the cache starts again: a script has few hot ones)


def user_site_at(frame: FrameType | None) -> list | None:
    """``user_site`` for a hot path (a call per step): the user frame's line is looked up once per call site.
    ``f_lineno`` decodes the code's line table up to the instruction (O(the function's length): ~10 µs at
    line 200 of a long training function), ``f_lasti`` is one read. The list returned is shared: read-only."""
    f = frame
    while f is not None:
        code = f.f_code
        if is_user_file(code.co_filename):
            key = (code, f.f_lasti)
            site = _lines.get(key)
            if site is None:
                if len(_lines) >= LINES_KEPT:
                    _lines.clear()
                site = _lines[key] = [code.co_filename, f.f_lineno, code.co_name]
            return site
        f = f.f_back
    return None


def stack_of(frame: FrameType | None, limit: int = 64) -> list[list]:
    """Outermost-first list of ``[file, line, func]``."""
    out = []
    f = frame
    while f is not None and len(out) < limit:
        out.append([f.f_code.co_filename, f.f_lineno, f.f_code.co_name])
        f = f.f_back
    out.reverse()
    return out


def in_backward(frame: FrameType | None) -> bool:
    """Is this thread inside ``torch.autograd.backward`` (where DDP's all-reduces are waited on)?"""
    f = frame
    while f is not None:
        name = f.f_code.co_name
        if name in ("_engine_run_backward", "backward") and "autograd" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False
