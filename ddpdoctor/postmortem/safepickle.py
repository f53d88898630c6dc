"""A pickle reader that resolves no global at all, for flight-recorder dumps from elsewhere.

Only a global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) can put a callable on the unpickler's stack, and
every one goes through ``find_class``; persistent ids go through ``persistent_load``. Both refuse, so
REDUCE/NEWOBJ/BUILD never have anything to call and nothing in the file is ever run. What comes out is
then checked to be plain data: dicts, lists, tuples, str, bytes, numbers, bool, None.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

PLAIN = (str, bytes, int, float, bool, type(None))


class UnsafePickle(ValueError):
    """The pickle refers to code (a global or a persistent id) or holds something that is not plain data."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickle(f"it refers to {module}.{name} (a pickle of plain data refers to no code)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickle("it uses persistent ids (a pickle of plain data has none)")


def loads(data: bytes) -> Any:
    """Plain data from ``data``. Raises UnsafePickle for code or non-plain objects, and
    pickle.UnpicklingError / EOFError / ValueError for a truncated or broken pickle."""
    obj = _NoGlobals(io.BytesIO(data)).load()
    check_plain(obj)
    return obj


_LEAF = frozenset(PLAIN)
_CONTAINER = frozenset({dict, list, tuple})


def check_plain(obj: Any) -> None:
    """Raise UnsafePickle unless ``obj`` is made of dicts, lists, tuples and PLAIN values only.
    Iterative with a seen-set: a pickle of shared references (memo) is walked once per container. The
    types of a container's items are collected in one pass (``map(type, ...)``) and only containers are
    walked further: a 1,024-rank job's dumps hold millions of leaves."""
    if type(obj) not in _CONTAINER:
        if type(obj) in _LEAF:
            return
        raise UnsafePickle(f"it holds a {type(obj).__name__}, not plain data")
    seen: set[int] = set()
    todo = [obj]
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        parts = (o.keys(), o.values()) if type(o) is dict else (o,)
        for items in parts:
            types = set(map(type, items))
            if types <= _LEAF:
                continue
            bad = types - _LEAF - _CONTAINER
            if bad:
                raise UnsafePickle(f"it holds a {next(iter(bad)).__name__}, not plain data")
            todo.extend(x for x in items if type(x) in _CONTAINER)
