"""Who keeps a tensor alive, named the way the user's code writes it (the walk; the line that stores into the
holder is found by ``storesite.py``).

A bounded breadth-first walk starts at what the user's code can name (the locals of every user frame on
the stack, innermost first, and the globals of their modules) and follows what a training script keeps
things in: lists, tuples, deques, sets, dicts; the attributes of objects of user-defined classes
(``self.losses``) and of user ``nn.Module``s; the class attributes of user classes (``Trainer.losses``);
user modules (``utils.CACHE``); the closure cells of user functions. Library objects (a DataLoader, an
optimizer) are not entered. The first container on a tensor's path is its *holder*; ``describe`` (from
``storesite.py``) names it with the line that stores into it.

Cost: at most ``max_visits`` objects per walk; containers longer than ``BIG`` are skipped unless one of
their first or last elements could hold a tensor (a list of a million floats costs nothing).
"""

from __future__ import annotations

import collections
import sys
import types
from typing import Any, Callable

from ddpdoctor.rank import sites

# the storing line and the holder as a record; importable from here as before
from ddpdoctor.rank.probes.memleak.storesite import Holder, _user_type

BIG = 512
MAX_ELEMS = 200_000
MAX_DEPTH = 5
SEQ_TYPES = (list, tuple, collections.deque, set, frozenset)


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
    owners = []  # instances of the user's classes that only a library frame names (its `self`)
    f = frame
    while f is not None:
        if sites.is_user_file(f.f_code.co_filename):
            frames.append(f)
        elif f.f_code.co_varnames[:1] == ("self",):
            # a Trainer subclass built inline and driven by the library's loop: only the loop's `self` has it
            me = f.f_locals.get("self")
            if me is not None and _user_type(type(me)):
                owners.append(me)
        f = f.f_back
    for fr in frames:
        try:
            loc = dict(fr.f_locals)
        except Exception:
            continue
        scope = ("code", fr.f_code)
        for name, val in loc.items():
            out.append((name, val, (name, ("name", name), scope), scope))
    for me in {id(o): o for o in owners}.values():  # by identity: a user class may not be hashable
        name = "self"
        scope = ("class", type(me))
        out.append((name, me, (name, ("name", name), scope), scope))
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


def walk(
    frame: Any,
    on_tensor: Callable[[Any, Holder | None, str], None],
    tensor_types: Any,
    skip: tuple = (),
    max_visits: int = 60_000,
    extra: list | None = None,
) -> int:
    """Visit every tensor reachable from the user's names; ``on_tensor(t, holder, path)``. Returns the
    number of objects visited. ``extra``: more roots, visited first (holders found from a growth upwards)."""
    torch = sys.modules["torch"]
    Module = torch.nn.Module
    seen: set[int] = set()
    queue: collections.deque = collections.deque()
    for name, val, holder, scope in [*(extra or ()), *roots(frame)]:
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
                queue.append(
                    (
                        x,
                        path + "[]",
                        depth + 1,
                        holder
                        if holder and "[]" in holder[0]
                        else (path + "[]", holder[1], holder[2])
                        if holder
                        else None,
                        scope,
                    )
                )
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
                    if (
                        not k.startswith("__")
                        and not callable(v)
                        and not isinstance(v, (property, staticmethod, classmethod))
                    ):
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
                    queue.append(
                        (
                            v,
                            f"{path}.<closure>.{name}",
                            depth + 1,
                            holder if holder and "[]" in holder[0] else (name, ("name", name), sc),
                            sc,
                        )
                    )
            if (obj.__defaults__ or obj.__kwdefaults__) and sites.is_user_file(code.co_filename):
                # `def log(x, seen=[])`: a default argument lives as long as the function
                sc = ("code", code)
                n = code.co_argcount
                named_defaults = list(
                    zip(code.co_varnames[:n][n - len(obj.__defaults__ or ()) :], obj.__defaults__ or ())
                )
                named_defaults += list((obj.__kwdefaults__ or {}).items())
                for name, v in named_defaults:
                    if type(v) in (int, float, str, bool, type(None)):
                        continue
                    queue.append((v, f"{path}.<default>.{name}", depth + 1, (name, ("name", name), sc), sc))
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
