"""Who keeps a tensor alive, named the way the user's code writes it, with the line that stores into it.

A bounded breadth-first walk starts at what the user's code can name (the locals of every user frame on
the stack, innermost first, and the globals of their modules) and follows what a training script keeps
things in: lists, tuples, deques, sets, dicts; the attributes of objects of user-defined classes
(``self.losses``) and of user ``nn.Module``s; the class attributes of user classes (``Trainer.losses``);
user modules (``utils.CACHE``); the closure cells of user functions. Library objects (a DataLoader, an
optimizer) are not entered. The first container on a tensor's path is its *holder*; the line that stores
into the holder is found in the source (``.append(...)``, ``+=``, ``x[k] = ...``), preferring the
functions on the stack, then the methods of the holder's class, then the holder's file.

Cost: at most ``max_visits`` objects per walk; containers longer than ``BIG`` are skipped unless one of
their first or last elements could hold a tensor (a list of a million floats costs nothing).
"""

from __future__ import annotations

import ast
import collections
import sys
import types
from typing import Any, Callable

from ddpdoctor.rank import sites

BIG = 512
MAX_ELEMS = 200_000
MAX_DEPTH = 5
MUTATORS = ("append", "extend", "insert", "update", "setdefault", "add", "appendleft", "extendleft", "__setitem__")
SEQ_TYPES = (list, tuple, collections.deque, set, frozenset)

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


def _could_hold(x: Any, tensor_types: Any) -> bool:
    t = type(x)
    return t in tensor_types or t in SEQ_TYPES or isinstance(x, dict) or hasattr(x, "__dict__")


def _elements(obj: Any, tensor_types: Any) -> list:
    vals = list(obj.values()) if isinstance(obj, dict) else obj
    n = len(vals)
    if n > BIG:
        if isinstance(vals, (set, frozenset)):
            vals = list(vals)
        if isinstance(vals, collections.deque):
            vals = list(vals)
        if not any(_could_hold(x, tensor_types) for x in (*vals[:8], *vals[-64:])):
            return []
        if n > MAX_ELEMS:
            vals = vals[-MAX_ELEMS:]
    return list(vals)


def roots(frame: Any) -> list[tuple[str, Any, Holder | None, tuple]]:
    """(name, value, holder-if-named-here, scope) for the user's locals (innermost frame first) and the
    globals of user modules on the stack."""
    out: list[tuple[str, Any, Holder | None, tuple]] = []
    frames = []
    f = frame
    while f is not None:
        if sites.is_user_file(f.f_code.co_filename):
            frames.append(f)
        f = f.f_back
    for fr in frames:
        try:
            loc = dict(fr.f_locals)
        except Exception:
            continue
        scope = ("code", fr.f_code)
        for name, val in loc.items():
            out.append((name, val, (name, ("name", name), scope), scope))
    seen_mods: set[int] = set()
    mods = [fr.f_globals for fr in frames]
    main = sys.modules.get("__main__")
    if main is not None:
        mods.append(main.__dict__)
    for g in mods:
        if id(g) in seen_mods or len(g) > 5000:
            continue
        seen_mods.add(id(g))
        fn = g.get("__file__") or ""
        scope = ("module", fn)
        for name, val in list(g.items()):
            if name.startswith("__"):
                continue
            out.append((name, val, (name, ("name", name), scope), scope))
    # the user's modules that DDP wraps, even when no user frame names them (a framework built the DDP
    # around them: Lightning's Trainer.fit(MyModule()), Accelerate's prepare)
    from ddpdoctor.rank import active

    p = active.probe
    for ddp in list(getattr(p, "ddp_models", ()) or ()):
        try:
            subs = [m for m in ddp.module.modules() if _user_type(type(m))]
        except Exception:
            continue
        for m in subs[:4]:
            name = type(m).__name__
            scope = ("module", getattr(sys.modules.get(type(m).__module__), "__file__", "") or "")
            out.append((name, m, (name, ("name", name), scope), scope))
    return out


def walk(frame: Any, on_tensor: Callable[[Any, Holder | None, str], None], tensor_types: Any,
         skip: tuple = (), max_visits: int = 60_000) -> int:
    """Visit every tensor reachable from the user's names; ``on_tensor(t, holder, path)``. Returns the
    number of objects visited."""
    torch = sys.modules["torch"]
    Module = torch.nn.Module
    seen: set[int] = set()
    queue: collections.deque = collections.deque()
    for name, val, holder, scope in roots(frame):
        queue.append((val, name, 0, holder, scope))
    visits = 0
    while queue and visits < max_visits:
        obj, path, depth, holder, scope = queue.popleft()
        oid = id(obj)
        if oid in seen:
            continue
        seen.add(oid)
        visits += 1
        t = type(obj)
        if t in tensor_types:
            on_tensor(obj, holder, path)
            continue
        if depth >= MAX_DEPTH or t in (int, float, str, bytes, bool, type(None)):
            continue
        if t in SEQ_TYPES or isinstance(obj, dict):
            if t is dict and "__builtins__" in obj:
                continue  # a namespace, not data
            try:
                elems = _elements(obj, tensor_types)
            except Exception:
                continue
            for x in elems:
                tx = type(x)
                if tx in (int, float, str, bool, type(None)):
                    continue
                queue.append((x, path + "[]", depth + 1, holder if holder and "[]" in holder[0] else
                              (path + "[]", holder[1], holder[2]) if holder else None, scope))
            continue
        if skip and isinstance(obj, skip):
            continue
        if t is types.ModuleType:
            fn = getattr(obj, "__file__", None) or ""
            if fn and sites.is_user_file(fn):
                sc = ("module", fn)
                for k, v in list(vars(obj).items()):
                    if not k.startswith("__"):
                        queue.append((v, f"{path}.{k}", depth + 1, _named(holder, path, k, sc), sc))
            continue
        if isinstance(obj, type):
            if _user_type(obj):
                sc = ("class", obj)
                for k, v in list(vars(obj).items()):
                    if not k.startswith("__") and not callable(v) and not isinstance(v, (property, staticmethod,
                                                                                         classmethod)):
                        queue.append((v, f"{obj.__name__}.{k}", depth + 1, _named(holder, obj.__name__, k, sc), sc))
            continue
        if t is types.FunctionType:
            code = obj.__code__
            if obj.__closure__ and sites.is_user_file(code.co_filename):
                sc = ("code", code)
                for name, cell in zip(code.co_freevars, obj.__closure__):
                    try:
                        v = cell.cell_contents
                    except ValueError:
                        continue
                    queue.append((v, f"{path}.<closure>.{name}", depth + 1,
                                  holder if holder and "[]" in holder[0] else (name, ("name", name), sc), sc))
            continue
        if t is types.MethodType:
            queue.append((obj.__self__, path, depth, holder, scope))
            continue
        if isinstance(obj, Module):
            user = _user_type(t)
            if user:
                d = obj.__dict__
                sc = ("class", t)
                for k, v in list(d.items()):
                    if not k.startswith("_"):
                        queue.append((v, f"{path}.{k}", depth + 1, _named(holder, path, k, sc), sc))
            for k, v in list(obj._modules.items()):
                if v is not None:
                    queue.append((v, f"{path}.{k}", depth + 1, holder, scope))
            continue
        if _user_type(t):
            try:
                d = vars(obj)
            except TypeError:
                continue
            sc = ("class", t)
            for k, v in list(d.items()):
                queue.append((v, f"{path}.{k}", depth + 1, _named(holder, path, k, sc), sc))
    return visits


def _named(holder: Holder | None, path: str, attr: str, scope: tuple) -> Holder:
    """Inside a container the container stays the holder; otherwise the attribute names it."""
    if holder and "[]" in holder[0]:
        return holder
    return (f"{path}.{attr}", ("attr", attr), scope)


# -- where the code stores into a holder --------------------------------------------------------------

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
    groups: list[list] = []   # each group: [(filename, lo, hi)], searched in order
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
    if plain is not None:  # only a plain assignment (`self.x = ...`): the best line there is
        return {"name": plain[2], "file": plain[4], "line": plain[1], "func": plain[3]}
    return None


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
    if cache is not None:
        cache[ck] = out
    return out
