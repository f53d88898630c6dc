"""Passes of samplers and DataLoader iterators as the check probes track them, and their limits."""

from __future__ import annotations

import hashlib
import weakref
from array import array
from typing import Any

INDEX_CAP = 200_000  # indices kept per sampler epoch (a digest always)
INDEX_PASSES = 8  # passes of one sampler whose indices are kept (digests for all)
OPTSTEP_DETAIL = 64  # optimizer steps recorded one by one; then a summary at the end
SET_EPOCH_DETAIL = 8  # set_epoch calls recorded per sampler
FP_SAMPLE = 1024  # elements read from a data tensor/array for the data set fingerprint
LOADER_INDEX_CAP = 200_000  # indices kept per loader pass (the first ones; a digest of all)
CHAIN_DEPTH = 6  # samplers followed down batch_sampler/sampler attributes
FRAMEWORK_PKGS = {
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "lightning_fabric": "lightning",
    "accelerate": "accelerate",
    "transformers": "transformers",
}


def _digest(values: Any) -> str:
    return hashlib.sha1(array("q", values).tobytes()).hexdigest()[:16]


class _Pass:
    """One iteration of a sampler or a DataLoader, open until its iterator is freed."""

    __slots__ = ("what", "key", "k", "n", "inner", "s0", "f0", "done", "__weakref__")

    def __init__(self, what: str, key: int, k: int, n: int | None, inner: Any, s0: int, f0: int) -> None:
        self.what, self.key, self.k, self.n, self.inner, self.s0, self.f0 = what, key, k, n, inner, s0, f0
        self.done = False


class _LoaderPass:
    """One pass of a DataLoader iterator, as fetched: counts, a digest of every index, the first indices."""

    __slots__ = (
        "ordinal",
        "k",
        "src",
        "n",
        "batches",
        "maxb",
        "h",
        "keep",
        "truncated",
        "kind",
        "steps",
        "fwds",
        "exhausted",
        "fresh",
        "done",
        "site",
        "samplers",
        "first",
    )

    def __init__(self, ordinal: int, k: int, src: Any, keep: bool, site: Any) -> None:
        self.ordinal, self.k, self.src, self.site = ordinal, k, src, site
        self.n = self.batches = self.maxb = self.steps = self.fwds = 0
        self.h = hashlib.sha1()
        self.keep: array | None = array("q") if keep else None
        self.truncated = self.exhausted = self.fresh = self.done = False
        self.kind = "int"
        self.samplers: list[_Pass] = []
        self.first: str | None = None  # a digest of the first batch (an IterableDataset has no indices)

    def add(self, idx: Any) -> None:
        self.batches += 1
        if self.kind != "int":
            return
        t = type(idx)
        try:
            if t is list or t is tuple:
                a = array("q", idx)
            elif t is int:
                a = array("q", (idx,))
            elif idx is None:
                self.kind = "none"  # an IterableDataset: no indices
                return
            else:
                v = idx.tolist() if hasattr(idx, "tolist") else list(idx)
                a = array("q", v if isinstance(v, list) else (v,))
        except (TypeError, ValueError, OverflowError):
            self.kind = "none" if t is list and idx and idx[0] is None else "opaque"
            return
        m = len(a)
        self.n += m
        if m > self.maxb:
            self.maxb = m
        self.h.update(a)
        keep = self.keep
        if keep is not None and not self.truncated:
            room = LOADER_INDEX_CAP - len(keep)
            if m <= room:
                keep.extend(a)
            else:
                keep.extend(a[:room])
                self.truncated = True


def _feed(inner: Any) -> Any:
    """The sampler's own list iterator, behind a generator (a generator can be watched with a weakref)."""
    yield from inner


def _watch(c: Any, obj: Any, ps: _Pass) -> None:
    """Close ``ps`` when ``obj`` (the iterator handed to the script) is freed."""
    try:
        fin = weakref.finalize(obj, c.close_pass, ps, "freed")
        fin.atexit = False
    except TypeError:
        pass
