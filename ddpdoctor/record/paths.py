"""Is this file the user's code? One rule for both sides (the rank side's stack walks and the analysis of
tracebacks and stacks), each with its own idea of where the libraries are. Stdlib only."""

from __future__ import annotations

import os

# what marks a library path when only the path is known (the analysis side: another machine's paths)
LIB_MARKERS = ("site-packages", "/lib/python3", f"{os.sep}ddpdoctor{os.sep}")


def is_user_path(
    path: str, user_dirs: tuple[str, ...] = (), lib_dirs: tuple[str, ...] = (), lib_markers: tuple[str, ...] = ()
) -> bool:
    """The user's code: a file under one of ``user_dirs`` (the script's folder: always the user's), else
    anything but ``<frozen ...>``/``<string>``, files under ``lib_dirs`` and paths containing a
    ``lib_markers`` entry. Directories end with ``os.sep``."""
    if path.startswith("<"):
        return False  # first: abspath("<frozen runpy>") lies under the cwd, often the script's folder
    if user_dirs and os.path.abspath(path).startswith(user_dirs):
        return True
    if lib_dirs and os.path.abspath(path).startswith(lib_dirs):
        return False
    # a path relative to its checkout (a golden run directory's, "ddpdoctor/rank/probe.py") holds the markers too
    rooted = path if path.startswith(os.sep) else os.sep + path
    return not any(m in rooted for m in lib_markers)


_DISTRIBUTED = f"{os.sep}torch{os.sep}distributed{os.sep}"


_AUTOGRAD = f"{os.sep}torch{os.sep}autograd{os.sep}"


def from_autograd(paths: list[str]) -> bool:
    """A recorded stack (innermost first) of a collective that autograd's engine issued from C++ with no
    torch.distributed function on the way: DDP's reducer all-reducing a bucket in backward. FSDP's calls go
    through torch.distributed's functions and are not these."""
    return bool(paths) and not any(_DISTRIBUTED in p for p in paths) and any(_AUTOGRAD in p for p in paths)


def callers_start(paths: list[str]) -> int:
    """In a recorded stack (innermost first), the index of torch.distributed's innermost frame (0 where none is
    there): the frames before it are inside the collective's call (a process group's method, and whatever a
    library patched into it), never the user's call site; the user's frames are searched from there outwards."""
    return next((i for i, p in enumerate(paths) if _DISTRIBUTED in p), 0)
