"""A pickle reader that resolves no global at all, for flight-recorder dumps from elsewhere.

Only a global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) can put a callable on the unpickler's stack, and
every one goes through ``find_class``; persistent ids go through ``persistent_load``. Both refuse, so
REDUCE/NEWOBJ/BUILD never have anything to call and nothing in the file is ever run. What comes out is
then checked to be plain data: dicts, lists, tuples, str, bytes, numbers, bool, None.
"""

from __future__ import annotations

import io
import pickle
from itertools import chain
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
    Level by level: the items of every container of one level are typed in one pass (``map(type, ...)``),
    and only the containers go on to the next level, each once (a pickle of shared references, memo, is
    walked once per container, never once per reference). A 1,024-rank job's dumps hold millions of
    leaves: a loop in Python per leaf took as long as unpickling."""
    if type(obj) not in _CONTAINER:
        if type(obj) in _LEAF:
            return
        raise UnsafePickle(f"it holds a {type(obj).__name__}, not plain data")
    seen: set[int] = set()
    level = [obj]
    while level:
        fresh = {id(o): o for o in level if id(o) not in seen}
        seen.update(fresh)
        items = list(chain.from_iterable(chain(o.keys(), o.values()) if type(o) is dict else o for o in fresh.values()))
        types = set(map(type, items))
        bad = types - _LEAF - _CONTAINER
        if bad:
            raise UnsafePickle(f"it holds a {next(iter(bad)).__name__}, not plain data")
        level = [x for x in items if type(x) in _CONTAINER] if types & _CONTAINER else []
