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


def uses_mp_spawn(tree: ast.Module) -> bool:
    """Does the script start its own ranks with torch.multiprocessing.spawn / start_processes?"""
    mp_aliases = set()
    fn_aliases = set()
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
