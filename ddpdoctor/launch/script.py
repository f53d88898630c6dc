"""Checks on the user's script before anything is launched, and mp.spawn detection."""

from __future__ import annotations

import ast
import os

from ddpdoctor.errors import DdpdoctorError

_SPAWN_FUNCS = {"spawn", "start_processes"}


def check_script(path: str) -> ast.Module:
    if not os.path.exists(path):
        raise DdpdoctorError(f"script not found: {path}")
    if not os.path.isfile(path):
        raise DdpdoctorError(f"not a file: {path}")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise DdpdoctorError(f"cannot read {path}: {e.strerror}") from None
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as e:
        raise DdpdoctorError(f"{path}:{e.lineno}: SyntaxError: {e.msg}") from None
    except ValueError as e:
        raise DdpdoctorError(f"{path}: cannot parse: {e}") from None


def module_path(name: str, cwd: str | None = None) -> str:
    """The file ``python -m NAME`` would run, found without running any of the package's code (no
    ``__init__`` is executed here: it may import torch): the working directory first, as ``python -m`` puts
    it first on ``sys.path``, then this interpreter's path. A package runs its ``__main__``. Not found: one
    line, exit 2."""
    import importlib.machinery
    import importlib.util
    import sys

    parts = name.split(".")
    if not name or not all(p.isidentifier() for p in parts):
        raise DdpdoctorError(f"-m {name}: not a module name")
    top = importlib.machinery.PathFinder.find_spec(parts[0], [cwd or os.getcwd(), *sys.path])
    if top is None:
        try:  # an editable install's finder sits on sys.meta_path, not on sys.path; a top-level name runs no code
            top = importlib.util.find_spec(parts[0])
        except (ImportError, ValueError):
            top = None
    spec = top
    for i, part in enumerate(parts[1:], 1):
        locations = list(spec.submodule_search_locations or ()) if spec else []
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), locations) if locations else None
    if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
        locations = list(spec.submodule_search_locations)
        spec = importlib.machinery.PathFinder.find_spec(f"{name}.__main__", locations)
        if spec is None:
            raise DdpdoctorError(f"-m {name}: a package without a __main__ module cannot be run")
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py") or not os.path.isfile(origin):
        raise DdpdoctorError(f"-m {name}: no module of that name (python -m {name} would say the same)")
    return origin


def uses_mp_spawn(tree: ast.Module) -> bool:
    """Does the script start its own ranks with torch.multiprocessing.spawn / start_processes?"""
    mp_aliases: set[str] = set()
    fn_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch.multiprocessing":
                    mp_aliases.add(a.asname or "torch.multiprocessing")
        elif isinstance(node, ast.ImportFrom):
            if node.module == "torch.multiprocessing":
                fn_aliases.update(a.asname or a.name for a in node.names if a.name in _SPAWN_FUNCS)
            elif node.module == "torch":
                mp_aliases.update(a.asname or a.name for a in node.names if a.name == "multiprocessing")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in fn_aliases:
            return True
        if isinstance(f, ast.Attribute) and f.attr in _SPAWN_FUNCS:
            base = ast.unparse(f.value)
            if base in mp_aliases or base == "torch.multiprocessing":
                return True
    return False


_TRAINERS = {"Trainer", "Fabric"}  # Lightning's Trainer and Fabric start their own ranks from `devices`


def _devices_value(node: ast.expr) -> int | None:
    """``devices=2``, ``devices="2"``, ``devices=[0, 1]`` -> the number of ranks; "auto", -1 and
    anything computed -> None."""
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v if v >= 1 else None
        if isinstance(v, str) and v.strip().isdigit():
            return int(v.strip()) or None
        return None
    if (
        isinstance(node, (ast.List, ast.Tuple))
        and node.elts
        and all(
            isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool)
            for e in node.elts
        )
    ):
        return len(node.elts)
    return None


def trainer_devices(tree: ast.Module) -> int | None:
    """The number of ranks a Lightning script asks for: ``devices=N`` (a literal) in its ``Trainer(...)`` /
    ``L.Trainer(...)`` / ``Fabric(...)`` calls, when all of them agree. Lightning started by
    ``python train.py`` spawns that many ranks itself by re-running the script; under torchrun it uses
    torchrun's ranks instead, but only when their number matches ``devices``."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name not in _TRAINERS:
            continue
        for kw in node.keywords:
            if kw.arg == "devices":
                n = _devices_value(kw.value)
                if n is None:
                    return None
                found.add(n)
    return found.pop() if len(found) == 1 else None
