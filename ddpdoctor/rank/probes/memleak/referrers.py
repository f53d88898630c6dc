"""Who holds what grew, found from the growth upwards: the referrers of objects that grew (old members of a
tensor group whose count rises, the roots of the biggest autograd graphs), followed up through plain
containers to the first thing the user's code names. That is an attribute of an instance of any class
(the user's own, or a framework object such as a Trainer, a LightningModule or a callback that no user
frame names), a module global, a closure cell, a default argument, or a local of a user frame.

The downward walk (``holders.py``) starts at what the user's frames can name; it misses a holder that
only a library frame reaches (a ``Trainer`` subclass built inline and driven by the library's loop, a
callback kept in ``trainer.callbacks``). This search does not depend on the stack.

Cost: one ``gc.get_referrers`` scan of the tracked objects per level, for every target of the level at
once (a few tens of ms on a large process), at most ``MAX_LEVELS`` levels and ``MAX_FRONTIER`` objects per
level, and only when a census saw something grow.
"""

from __future__ import annotations

import collections
import gc
import sys
import time
import types
from typing import Any

from ddpdoctor.rank import sites
from ddpdoctor.rank.probes.memleak.storesite import Holder

MAX_LEVELS = 7
MAX_FRONTIER = 96
TIME_CAP_S = 1.0  # of the calling thread's CPU time (a busy host must not cut the search short)
CONTAINERS = (list, tuple, dict, set, frozenset, collections.deque, collections.OrderedDict, collections.defaultdict)
_OWN_PREFIX = __name__.rsplit(".", 4)[0]  # "ddpdoctor": our own frames and objects are never holders


def _ours(obj: Any) -> bool:
    mod = getattr(type(obj), "__module__", "") or ""
    return mod == _OWN_PREFIX or mod.startswith(_OWN_PREFIX + ".")


def _own_dict(obj: Any) -> Any:
    try:
        return object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None


def _attr_of(owner: Any, child: Any) -> str | None:
    """The attribute of ``owner`` whose value is ``child`` (``__dict__`` or ``__slots__``)."""
    d = _own_dict(owner)
    if isinstance(d, dict):
        for k, v in list(d.items()):
            if v is child and isinstance(k, str):
                return k
    for cls in type(owner).__mro__:
        for s in getattr(cls, "__slots__", ()) or ():
            try:
                if object.__getattribute__(owner, s) is child:
                    return str(s)
            except (AttributeError, TypeError):
                continue
    return None


def _dict_key(d: dict, child: Any) -> str | None:
    for k, v in list(d.items()):
        if v is child:
            return k if isinstance(k, str) else repr(k)
    return None


def _module_of_globals(d: dict) -> types.ModuleType | None:
    name = d.get("__name__")
    mod = sys.modules.get(name) if isinstance(name, str) else None
    return mod if mod is not None and getattr(mod, "__dict__", None) is d else None


class _Node:
    """One object on the way up from the targets: the object, the targets below it, the node below it."""

    __slots__ = ("obj", "targets", "below")

    def __init__(self, obj: Any, targets: list[int], below: _Node | None) -> None:
        self.obj = obj
        self.targets = targets  # several targets may lie below one container (a list of kept tensors)
        self.below = below

    def container(self, upto: int = 0) -> bool:
        """Does a plain container lie on the way from the target to here (``upto`` nodes at the top left
        out: a function's closure tuple and cell, or its defaults tuple, are not the user's containers)?"""
        chain = []
        n: _Node | None = self
        while n is not None:
            chain.append(n)
            n = n.below
        inner = chain[upto:-1]  # the target itself is not a container of itself
        return any(isinstance(x.obj, CONTAINERS) for x in inner)


def find(
    targets: list[Any], keep_out: set[int] | None = None, stats: dict[str, Any] | None = None
) -> dict[int, tuple[Holder, Any]]:
    """For each target (by ``id``), the holder the user's code names, as ``holders.walk`` writes one:
    ``(path, key, scope)``, with ``[]`` in the path when containers lie between the holder and the target;
    and its owner (the instance, class, module globals, function or frame whose slot it is).

    ``keep_out``: ids of the caller's own containers that hold the targets (never holders). ``stats``, when
    given, gets ``capped``: True when ``TIME_CAP_S`` cut the search short with targets left unnamed."""
    found: dict[int, tuple[Holder, Any]] = {}
    if not targets:
        return found
    deadline = time.thread_time() + TIME_CAP_S
    own = set(keep_out or ()) | {id(targets), id(sys._getframe())}
    seen: set[int] = {id(t) for t in targets}
    frontier: dict[int, _Node] = {id(t): _Node(t, [id(t)], None) for t in targets}
    for _level in range(MAX_LEVELS):
        if not frontier:
            break
        if time.thread_time() > deadline:
            if stats is not None:
                stats["capped"] = True
            break
        objs = [n.obj for n in frontier.values()]
        own |= {id(objs), id(frontier)}
        refs = gc.get_referrers(*objs)
        own.add(id(refs))
        nxt: dict[int, _Node] = {}
        own.add(id(nxt))
        for r in refs:
            rid = id(r)
            if rid in own or rid in seen:
                continue
            if isinstance(r, types.FrameType):
                _from_frame(r, frontier, found)
                continue
            if _ours(r):
                continue
            try:  # which frontier objects r holds
                below = [frontier[id(x)] for x in gc.get_referents(r) if id(x) in frontier]
            except Exception:  # an object whose traversal fails: no holder there
                continue
            below = [b for b in below if any(t not in found for t in b.targets)]
            if not below:
                continue
            named = False
            for b in below:
                holder = _named(r, b)
                if holder is not None:
                    named = True
                    for t in b.targets:
                        found.setdefault(t, (holder, r))
            if named:
                continue
            if isinstance(r, (*CONTAINERS, types.CellType)) and not (isinstance(r, dict) and _module_of_globals(r)):
                seen.add(rid)
                if len(nxt) < MAX_FRONTIER:
                    ts = list(dict.fromkeys(t for b in below for t in b.targets if t not in found))
                    nxt[rid] = _Node(r, ts, below[0])
        del refs, objs
        frontier = nxt
        if all(id(t) in found for t in targets):
            break
    return found


def _path(holder_path: str, container: bool) -> str:
    return holder_path + "[]" if container else holder_path


def _from_frame(fr: types.FrameType, frontier: dict[int, _Node], found: dict[int, tuple[Holder, Any]]) -> None:
    """A frame's local that holds a frontier object names it, when the frame runs the user's code."""
    code = fr.f_code
    if not sites.is_user_file(code.co_filename):
        return
    try:
        loc = dict(fr.f_locals)
    except Exception:  # a frame whose locals cannot be read: no name there
        return
    for name, v in loc.items():
        n = frontier.get(id(v))
        if n is not None and v is n.obj:
            for t in n.targets:
                found.setdefault(t, ((_path(name, n.container()), ("name", name), ("code", code)), fr))


def _named(r: Any, node: _Node) -> Holder | None:
    """``r`` holds ``node.obj``: the holder when the user's code names ``r``'s slot for it, else None."""
    obj = node.obj
    if isinstance(r, dict):
        mod = _module_of_globals(r)
        if mod is None:
            return None
        k = _dict_key(r, obj)
        if k is None or k.startswith("__"):
            return None
        return (_path(k, node.container()), ("name", k), ("module", getattr(mod, "__file__", "") or ""))
    if isinstance(r, types.FunctionType):
        return _in_function(r, node)
    if isinstance(r, (*CONTAINERS, types.CellType, types.MethodType, types.CodeType, types.ModuleType)):
        return None
    # an instance or a class whose own __dict__ is the node: the attribute is the key holding the one below
    slot, inner = (node.below, node.below) if _own_dict(r) is obj and node.below is not None else (node, None)
    if isinstance(r, type):  # a class holds its namespace (a dict no proxy shows) or the value itself
        for cand in (node, node.below) if node.below is not None else (node,):
            for k, v in list(vars(r).items()):
                if v is cand.obj and not k.startswith("__"):
                    return (_path(f"{r.__name__}.{k}", cand.container()), ("attr", k), ("class", r))
        return None
    if inner is not None:
        k = _dict_key(obj, inner.obj)
        if k is None or k.startswith("__"):
            return None
        return (_path(f"self.{k}", inner.container()), ("attr", k), ("class", type(r)))
    attr = _attr_of(r, obj)
    if attr is None or attr.startswith("__"):
        return None
    # written as the class's own methods write it; storesite finds the line that stores into it
    return (_path(f"self.{attr}", node.container()), ("attr", attr), ("class", type(r)))


def _in_function(fn: types.FunctionType, node: _Node) -> Holder | None:
    """A function that holds ``node.obj`` as its closure tuple or its defaults: the variable's name."""
    code = fn.__code__
    inner = node.below
    if fn.__closure__ is node.obj and inner is not None:  # closure tuple -> cell -> value
        for name, cell in zip(code.co_freevars, fn.__closure__):
            if cell is inner.obj:
                return (_path(name, inner.container(upto=1)), ("name", name), ("code", code))
        return None
    if fn.__defaults__ is node.obj and inner is not None:
        n = code.co_argcount
        names = code.co_varnames[:n][n - len(fn.__defaults__) :]
        for name, v in zip(names, fn.__defaults__):
            if v is inner.obj:
                return (_path(name, inner.container()), ("name", name), ("code", code))
        return None
    if fn.__kwdefaults__ is node.obj and inner is not None:
        k = _dict_key(fn.__kwdefaults__, inner.obj)
        if k:
            return (_path(k, inner.container()), ("name", k), ("code", code))
    return None


def resolve(owner_ref: Any, key: tuple) -> Any:
    """The holder's current value, from a weak reference to its owner (a registered root of the graph scan):
    an attribute of an instance or a class, a module global, a function's free variable or default."""
    owner = owner_ref() if callable(owner_ref) and not isinstance(owner_ref, dict) else owner_ref
    if owner is None:
        return None
    _kind, name = key
    if isinstance(owner, dict):
        return owner.get(name)
    if isinstance(owner, types.FunctionType):
        code = owner.__code__
        if owner.__closure__ and name in code.co_freevars:
            try:
                return owner.__closure__[code.co_freevars.index(name)].cell_contents
            except ValueError:  # an empty cell
                return None
        n = code.co_argcount
        names = code.co_varnames[:n][n - len(owner.__defaults__ or ()) :]
        if name in names:
            return (owner.__defaults__ or ())[names.index(name)]
        return (owner.__kwdefaults__ or {}).get(name)
    return getattr(owner, name, None)
