"""Where the user's code stores into a holder (``holders.py`` finds the holder): the line that appends to
it, adds to it or assigns into it, found in the source (``.append(...)``, ``+=``, ``x[k] = ...``), preferring
the functions on the stack, then the methods of the holder's class, then the holder's file. Each file is
parsed once (``_index``).
"""

from __future__ import annotations

import ast
import sys
from typing import Any

from ddpdoctor.rank import sites

MUTATORS = ("append", "extend", "insert", "update", "setdefault", "add", "appendleft", "extendleft", "__setitem__")

# a holder: (path as reached, key, scope) where key is ("name"|"attr", identifier) and scope says where a
# store into it may be written: ("code", code) | ("class", cls) | ("module", filename)
Holder = tuple


def _user_type(t: type, cache: dict[type, bool] = {}) -> bool:  # noqa: B006 - a per-process cache
    hit = cache.get(t)
    if hit is None:
        mod = sys.modules.get(getattr(t, "__module__", "") or "")
        fn = getattr(mod, "__file__", None) if mod is not None else None
        hit = bool(fn) and sites.is_user_file(fn)
        cache[t] = hit
    return hit


_index_cache: dict[str, list | None] = {}


def _index(filename: str) -> list:
    """Every store in a file: (key, line, priority, written, func). Priority 0: a mutation that grows the
    holder (`.append`, `+=`, `x = x + ...`); 1: `x[k] = ...`; 2: a plain assignment."""
    got = _index_cache.get(filename)
    if got is not None or filename in _index_cache:
        return got or []
    try:
        with open(filename, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except Exception:
        _index_cache[filename] = None
        return []
    out: list = []

    def key_of(e: ast.AST) -> tuple | None:
        if isinstance(e, ast.Name):
            return ("name", e.id)
        if isinstance(e, ast.Attribute):
            return ("attr", e.attr)
        return None

    def mentions(value: ast.AST, target: ast.AST) -> bool:
        src = ast.dump(target)
        return any(ast.dump(n) == src for n in ast.walk(value) if type(n) is type(target))

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            fn = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            ln = getattr(child, "lineno", 0)
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in MUTATORS:
                k = key_of(child.func.value)
                if k:
                    out.append((k, ln, 0, ast.unparse(child.func.value), fn))
            elif isinstance(child, ast.AugAssign):
                tg = child.target.value if isinstance(child.target, ast.Subscript) else child.target
                k = key_of(tg)
                if k:
                    out.append((k, ln, 0, ast.unparse(tg), fn))
            elif isinstance(child, (ast.Assign, ast.AnnAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for tg in targets:
                    if isinstance(tg, ast.Subscript):
                        k = key_of(tg.value)
                        if k:
                            out.append((k, ln, 1, ast.unparse(tg.value), fn))
                    else:
                        k = key_of(tg)
                        if k and child.value is not None:
                            out.append((k, ln, 0 if mentions(child.value, tg) else 2, ast.unparse(tg), fn))
            visit(child, fn)

    visit(tree, "<module>")
    _index_cache[filename] = out
    return out


def _code_range(code: Any) -> tuple[int, int]:
    hi = max((ln for _s, _e, ln in code.co_lines() if ln), default=code.co_firstlineno)
    return code.co_firstlineno, hi


def _class_codes(cls: type) -> list:
    codes = []
    for c in getattr(cls, "__mro__", (cls,)):
        if c is object or not _user_type(c):
            continue
        for v in vars(c).values():
            f = getattr(v, "__func__", v)
            code = getattr(f, "__code__", None)
            if code is not None and sites.is_user_file(code.co_filename):
                codes.append(code)
    return codes


def store_site(holder: Holder, frame: Any) -> dict[str, Any] | None:
    """``{"name", "file", "line", "func"}`` of the statement that stores into ``holder``."""
    path, key, scope = holder
    stack_codes = []
    f = frame
    while f is not None:
        if sites.is_user_file(f.f_code.co_filename):
            stack_codes.append(f.f_code)
        f = f.f_back
    groups: list[list] = []  # each group: [(filename, lo, hi)], searched in order
    kind, obj = scope
    if kind == "code":
        groups.append([(obj.co_filename, *_code_range(obj))])
        groups.append([(obj.co_filename, 0, 1 << 30)])
    elif kind == "class":
        cls_codes = _class_codes(obj)
        on_stack = [c for c in stack_codes if c in cls_codes]
        groups += [[(c.co_filename, *_code_range(c))] for c in on_stack]
        groups.append([(c.co_filename, *_code_range(c)) for c in cls_codes])
    elif kind == "module" and obj:
        groups.append([(obj, 0, 1 << 30)])
    groups += [[(c.co_filename, *_code_range(c))] for c in stack_codes]
    groups.append([(fn, 0, 1 << 30) for fn in dict.fromkeys(c.co_filename for c in stack_codes)])
    plain = None
    for group in groups:
        best = None
        for fn, lo, hi in group:
            for k, ln, prio, written, func in _index(fn):
                if k == key and lo <= ln <= hi and (best is None or (prio, ln) < (best[0], best[1])):
                    best = (prio, ln, written, func, fn)
        if best is not None and best[0] < 2:
            return {"name": best[2], "file": best[4], "line": best[1], "func": best[3]}
        plain = plain or best
    if kind in ("class", "module"):
        # stored from outside the class or module (`trainer.cache.append(x)` in a callback of another
        # file): any loaded user file that grows the same attribute or name
        best = None
        for fn in _user_files():
            for k, ln, prio, written, func in _index(fn):
                if k == key and prio < 2 and (best is None or (prio, fn, ln) < (best[0], best[4], best[1])):
                    best = (prio, ln, written, func, fn)
        if best is not None:
            return {"name": best[2], "file": best[4], "line": best[1], "func": best[3]}
    if plain is not None:  # only a plain assignment (`self.x = ...`): the best line there is
        return {"name": plain[2], "file": plain[4], "line": plain[1], "func": plain[3]}
    return None


def _user_files() -> list[str]:
    """The source files of the user's modules loaded in this process (``__main__`` first)."""
    out: dict[str, None] = {}
    for name, mod in list(sys.modules.items()):
        fn = getattr(mod, "__file__", None) if mod is not None else None
        if fn and fn.endswith(".py") and sites.is_user_file(fn):
            out[fn] = None
            if name == "__main__":
                out = {fn: None, **out}
    return list(out)


def describe(holder: Holder, frame: Any, cache: dict | None = None) -> dict[str, Any]:
    """The holder as a record: its name as the storing line writes it, the path it was reached by, the
    storing line; and whether it is a container (stored tensors) or a variable (an accumulated tensor)."""
    ck = (holder[0], holder[1], id(holder[2][1]))
    if cache is not None and ck in cache:
        return cache[ck]
    path = holder[0]
    container = "[]" in path
    base = path.split("[]", 1)[0]
    site = store_site((base, holder[1], holder[2]), frame)
    if site is None:
        kind, obj = holder[2]
        fn = obj.co_filename if kind == "code" else obj if kind == "module" else ""
        line = obj.co_firstlineno if kind == "code" else 0
        func = obj.co_name if kind == "code" else ""
        site = {"name": base, "file": fn, "line": line, "func": func}
    out = dict(site, path=base, container=container)
    if holder[2][0] == "class" and isinstance(holder[2][1], type):
        out["owner"] = holder[2][1].__name__  # the class whose instance holds it (`EpochLogits`)
    if cache is not None:
        cache[ck] = out
    return out
