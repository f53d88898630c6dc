"""A pickle reader that resolves no global at all, for flight-recorder dumps from elsewhere.

Only a global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) can put a callable on the unpickler's stack, and
every one goes through ``find_class``; persistent ids go through ``persistent_load``. Both refuse, so
REDUCE/NEWOBJ/BUILD never have anything to call and nothing in the file is ever run. What can come out is
then only what the opcodes build themselves: dicts, lists, tuples, str, bytes, numbers, bool, None, and
(protocol 4 and 5) sets, frozensets and bytearrays, all data. A protocol-5 out-of-band buffer needs
``buffers=``, which is never given, so it fails as a broken pickle.

There is no walk over the result: it protected nothing (none of those types runs code), and on a 1,024-rank
job it cost three times the unpickling itself. The dump parser (flight.py) type-checks every field it
reads and ignores the rest.
"""

from __future__ import annotations

import io
import pickle
from typing import Any


class UnsafePickle(ValueError):
    """The pickle refers to code (a global or a persistent id)."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickle(f"it refers to {module}.{name} (a pickle of plain data refers to no code)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickle("it uses persistent ids (a pickle of plain data has none)")


def loads(data: bytes) -> Any:
    """Plain data from ``data``. Raises UnsafePickle for a pickle that refers to code, and
    pickle.UnpicklingError / EOFError / ValueError for a truncated or broken pickle."""
    return _NoGlobals(io.BytesIO(data)).load()
