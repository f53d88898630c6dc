"""torch's flight-recorder dumps (pickle from ``_dump_fr_trace``, JSON from ``_dump_fr_trace_json``,
versions 2.x) as frozen dataclasses. The format is torch's ``FlightRecorder.hpp`` (keys, version "2.10"
in torch 2.13) and ``FlightRecorderDetail.hpp`` (dump_pickle / dump_json). Pure: no torch.

The dump holds no rank: like torch's own ``fr_trace`` loader, the rank is the number the file name ends
with (``TORCH_FR_DUMP_TEMP_FILE<rank>``).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import operator
import os
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from ddpdoctor.postmortem import safepickle

MAX_BYTES = 1 << 30  # a 20000-entry ring with stacks is ~50 MB; anything far larger is not a dump
SUPPORTED_MAJOR = "2"
_RANK = re.compile(r"(\d+)$")


class DumpError(ValueError):
    """A file that is not a readable flight-recorder dump: the one-line reason."""


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str


# ops whose input sizes differ across ranks by design: an all-to-all with split sizes (MoE token routing), a
# scatter (only the source passes the list), the v-variants. Their sizes are never compared across ranks (torch's
# own analyzer leaves all_to_all undecided and skips scatter's inputs); the op and dtypes still are
SIZES_DIFFER = frozenset(
    {
        "all_to_all",
        "all_to_all_single",
        "all_to_all_v_single",
        "alltoall",
        "alltoall_base",
        "scatter",
        "all_gather_v",
        "reduce_scatter_v",
    }
)


# ops whose output sizes differ across ranks by design besides those: a gather's list is the destination's alone
OUTPUTS_DIFFER = SIZES_DIFFER | {"gather"}


def compared_sizes(op: str, sizes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """The input sizes that must agree across ranks for ``op``: none for the ops of ``SIZES_DIFFER``."""
    return () if op in SIZES_DIFFER else sizes


def agreement(k: Any) -> tuple:
    """What must agree across ranks for two entries (or kinds) to be one call: the op, its compared sizes and
    its dtypes (``analysis/hang/facts.agreement``'s question in the dumps' vocabulary, whose op names and size
    rules are torch's). The dumps' signature adds the outputs; every judgement of the dumps asks this one."""
    return (k.op, compared_sizes(k.op, k.input_sizes), k.dtypes)


def compared_outputs(op: str, sizes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...]) -> tuple:
    """The output sizes and dtypes that must agree across ranks for ``op`` (torch's analyzer compares them
    too: an all-gather's list, a reduce-scatter's output); () for the ops of ``OUTPUTS_DIFFER``."""
    return () if op in OUTPUTS_DIFFER else (sizes, dtypes)


class Entry(NamedTuple):
    """One recorded collective or p2p op of one rank (one ``entries`` item), built from a Dump's columns
    where it is asked for (``Dump.entry``). A NamedTuple, not a frozen dataclass: a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) cost more than unpickling the entry."""

    record_id: int
    pg_id: str
    group: str  # process_group[0]: the group's name, the same on every rank
    group_desc: str
    seq: int  # collective_seq_id (p2p_seq_id for a p2p op)
    op_id: int  # op_id: counts p2p ops (and each op of a coalesced group) too; gloo's pg_status counts these
    is_p2p: bool
    op: str  # profiling_name without the backend: "all_reduce"
    backend: str  # "gloo", "nccl"
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    state: str  # scheduled | started | completed (gloo leaves "scheduled")
    retired: bool
    time_created_ns: int
    timeout_ms: int
    frames: tuple[Frame, ...]  # innermost first, as torch records them
    out_dtypes: tuple[str, ...] = ()  # output_dtypes

    def call(self) -> str:
        """``all_reduce([8])``: the op and its input shapes, as the report shows it."""
        sizes = ",".join("x".join(map(str, s)) or "scalar" for s in self.input_sizes)
        return f"{self.op}([{sizes}])" if self.input_sizes else self.op


@dataclass(frozen=True)
class PgStatus:
    last_enqueued: int
    last_started: int
    last_completed: int


class Kind(NamedTuple):
    """What a ring's entries share with many others (the same call site, group and tensors): every field of
    an Entry but its record id, sequence and op ids and creation time. A 1,024-rank job's two million entries
    are a few dozen kinds; a Dump keeps each once and the entries as columns of numbers."""

    pg_id: str
    group: str
    group_desc: str
    is_p2p: bool
    op: str
    backend: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    state: str
    retired: bool
    timeout_ms: int
    frames: tuple[Frame, ...]
    out_dtypes: tuple[str, ...] = ()


def _kind_of(e: Entry) -> Kind:
    return Kind(
        e.pg_id,
        e.group,
        e.group_desc,
        e.is_p2p,
        e.op,
        e.backend,
        e.input_sizes,
        e.output_sizes,
        e.dtypes,
        e.state,
        e.retired,
        e.timeout_ms,
        e.frames,
        e.out_dtypes,
    )


@dataclass(frozen=True, eq=False)
class Dump:
    """One rank's dump. The entries are held as columns (record id, sequence id, op id, creation time, and
    the index of the entry's Kind), oldest first: a 1,024-rank job has two million entries, and a NamedTuple
    each (building them, pickling them back from the reading workers, walking them in the judge) cost more
    than reading the files. ``entries`` builds the Entry tuples on first use; the judge's passes read the
    columns and the per-group maps below."""

    rank: int
    path: str
    fmt: str  # pickle | json
    version: str
    kinds: tuple[Kind, ...]
    kind: list[int]  # per entry: its index in kinds
    rid: list[int]  # per entry: record_id
    seq: list[int]  # per entry: collective_seq_id (p2p_seq_id for a p2p op)
    opid: list[int]  # per entry: op_id
    tns: list[int]  # per entry: time_created_ns
    pg_status: dict[str, PgStatus]  # by pg_id
    # group name -> member ranks where pg_config names them (NCCL). gloo records its default group before
    # the group has a name: under "" with the world's ranks, until a later group overwrites it with "[]"
    pg_ranks: dict[str, tuple[int, ...]]
    stacks: bool  # whether entries carry Python frames (JSON dumps carry none)
    # pg_id -> group name for pg_ids the ring holds no entry of (an empty dump, a group whose entries were
    # dropped), inferred from the other ranks' dumps (name_groups): pg_status is keyed by the rank's own
    # pg_id, which on NCCL is not the group's name ("5" on two ranks is two different TP groups)
    pg_names: dict[str, str] = field(default_factory=dict)

    # the maps below are built once per dump: the judge asks them for every rank of every pending
    # collective, and a scan of the ring per question made 1,024 ranks take minutes

    @property
    def n_entries(self) -> int:
        """How many entries the ring holds (without building them)."""
        return len(self.rid)

    def entry(self, i: int) -> Entry:
        """The ``i``-th entry, oldest first."""
        k = self.kinds[self.kind[i]]
        return Entry(
            self.rid[i],
            k.pg_id,
            k.group,
            k.group_desc,
            self.seq[i],
            self.opid[i],
            k.is_p2p,
            k.op,
            k.backend,
            k.input_sizes,
            k.output_sizes,
            k.dtypes,
            k.state,
            k.retired,
            self.tns[i],
            k.timeout_ms,
            k.frames,
            k.out_dtypes,
        )

    @cached_property
    def entries(self) -> tuple[Entry, ...]:
        """Every entry, oldest first (built on first use: the judge's usual passes need none of them)."""
        return tuple(map(self.entry, range(len(self.rid))))

    @cached_property
    def _groups(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for k in dict.fromkeys(self.kind):  # the kinds in the order their first entry comes
            out.setdefault(self.kinds[k].pg_id, self.kinds[k].group)
        return out

    @cached_property
    def group_index(self) -> dict[str, Sequence[int]]:
        """Per group: the positions of the rank's collective entries (p2p ops left out), oldest first."""
        coll = [k for k in self.kinds if not k.is_p2p]
        if len(coll) == len(self.kinds) and len({k.group for k in coll}) == 1:
            return {coll[0].group: range(len(self.rid))}  # the usual ring: one group, no p2p op
        group = [None if k.is_p2p else k.group for k in self.kinds]
        out: dict[str, list[int]] = {}
        for i, k in enumerate(self.kind):
            g = group[k]
            if g is not None:
                out.setdefault(g, []).append(i)
        return dict(out)

    @cached_property
    def _gseq(self) -> dict[str, list[int]]:
        return {g: take(self.seq, idx) for g, idx in self.group_index.items()}

    @cached_property
    def _ops(self) -> dict[str, list[int]]:
        return {g: take(self.opid, idx) for g, idx in self.group_index.items()}

    def group_ops(self, group: str) -> list[int]:
        """The op ids of the rank's collective entries on ``group``, oldest first (gloo's count p2p ops too)."""
        return self._ops.get(group, [])

    def group_seqs(self, group: str) -> list[int]:
        """The sequence ids of the rank's collective entries on ``group``, oldest first."""
        return self._gseq.get(group, [])

    def positions(self, group: str, seq: int) -> list[int]:
        """The positions of the rank's collective entries with this (group, sequence id): one, or a coalesced
        group's. The first few questions are a C scan of the group's sequence ids (list.index): a map of
        every position cost more than the few questions the judge usually asks; past them, the map."""
        self._asked[0] += 1
        if self._asked[0] > 8:
            return self._key_index.get((group, seq), [])
        seqs = self._gseq.get(group)
        if not seqs:
            return []
        idx = self.group_index[group]
        return [idx[j] for j in indices_of(seqs, seq)]

    @cached_property
    def _asked(self) -> list[int]:
        return [0]

    @cached_property
    def _key_index(self) -> dict[tuple[str, int], list[int]]:
        out: dict[tuple[str, int], list[int]] = {}
        seq = self.seq
        for g, idx in self.group_index.items():
            for i in idx:
                out.setdefault((g, seq[i]), []).append(i)
        return out

    @cached_property
    def done_index(self) -> dict[str, Sequence[int]]:
        """Per group: the positions of the collective entries this rank's own records show completed."""
        shut = self.open_index
        if not shut:
            return self.group_index
        out: dict[str, Sequence[int]] = {}
        gone = set(shut)
        for g, idx in self.group_index.items():
            if isinstance(idx, range) and shut == list(range(idx.stop - len(shut), idx.stop)):
                out[g] = range(idx.start, idx.stop - len(shut))  # a hang's ring: the newest ones open
                continue
            if len(shut) > 64:
                out[g] = [i for i in idx if i not in gone]
                continue
            keep = list(idx)  # the few open ones (a hang's last collectives) taken out of the sorted list
            for i in reversed(shut):
                j = bisect.bisect_left(keep, i)
                if j < len(keep) and keep[j] == i:
                    del keep[j]
            out[g] = keep
        return out

    def signature_at(self, group: str, seq: int) -> tuple:
        """The (op, input sizes, dtypes, output sizes) of every op at (group, seq), a coalesced group's
        ``coalesced`` closing entry left out: what must agree across ranks; () where the rank has none."""
        out = []
        for i in self.positions(group, seq):
            k = self.kinds[self.kind[i]]
            if not k.op.endswith("coalesced"):
                out.append((*agreement(k), compared_outputs(k.op, k.output_sizes, k.out_dtypes)))
        return tuple(out)

    @cached_property
    def signatures(self) -> dict[tuple[str, int], tuple]:
        """Per (group, seq): the (op, input sizes, dtypes, output sizes) of every op there, a coalesced group's ``coalesced``
        closing entry left out; what must agree across ranks."""
        keys = dict.fromkeys((g, q) for g, seqs in self._gseq.items() for q in seqs)
        out = {key: self.signature_at(*key) for key in keys}
        return {k: v for k, v in out.items() if v}

    @cached_property
    def open_index(self) -> list[int]:
        """The positions of the entries this rank's own records do not show completed, oldest first. gloo
        never moves an entry's state past "scheduled"; retired means no longer watched, the only word a p2p op
        (or a group without pg_status) has; pg_status counts op ids on gloo (p2p ops too) and sequence ids on
        NCCL, compared like with like."""
        col = self.opid if self.op_units else self.seq
        # per kind: completed or not whatever the entry (None: compare the entry's number with pg_status)
        fixed: list[bool | None] = []
        limit: list[int] = []
        for kd in self.kinds:
            st = self.pg_status.get(kd.pg_id)
            if kd.is_p2p or st is None:
                fixed.append(kd.state == "completed" or kd.retired)
                limit.append(0)
            else:
                fixed.append(None)
                limit.append(st.last_completed)
        if all(f is None for f in fixed) and len(set(limit)) == 1:
            top = limit[0]  # the usual ring: one group with pg_status, no p2p op
            return [i for i, v in enumerate(col) if v > top]
        out: list[int] = []
        for i, k in enumerate(self.kind):
            f = fixed[k]
            if (col[i] > limit[k]) if f is None else not f:
                out.append(i)
        return out

    @cached_property
    def completed(self) -> tuple[bool, ...]:
        """Per entry (aligned with ``entries``): whether this rank's own records show it completed (the
        complement of ``open_index``)."""
        out = [True] * len(self.rid)
        for i in self.open_index:
            out[i] = False
        return tuple(out)

    def at(self, group: str, seq: int) -> tuple[Entry, ...]:
        """The rank's collective entries with this (group, sequence id): one, or a coalesced group's."""
        return tuple(map(self.entry, self.positions(group, seq)))

    @cached_property
    def op_units(self) -> bool:
        """Whether pg_status counts op ids (gloo: ``last_enqueued_collective`` is the op id, which counts
        p2p ops too) rather than collective sequence ids (NCCL). Read from the newest entry of each group
        that tells them apart; else from the backend."""
        kinds, kind, opid, seq = self.kinds, self.kind, self.opid, self.seq
        status = [self.pg_status.get(k.pg_id) if not k.is_p2p else None for k in kinds]
        for i in range(len(kind) - 1, -1, -1):
            st = status[kind[i]]
            if st is None or opid[i] == seq[i]:
                continue
            if st.last_enqueued == opid[i]:
                return True
            if st.last_enqueued == seq[i]:
                return False
        return any(k.backend == "gloo" for k in kinds)

    def group_of(self, pg_id: str) -> str:
        """The group name of a pg_id (gloo and NCCL name groups by their pg_id unless named)."""
        got = self._groups.get(pg_id) or self.pg_names.get(pg_id)
        if got is not None:
            return got
        # gloo names every group by its pg_id; NCCL's pg_config names them otherwise: an unmapped pg_id there
        # is no group name, and reading it as one mixed a rank's "5" with another group called "5"
        return f"pg_id {pg_id}" if self.named_groups else pg_id

    @cached_property
    def named_groups(self) -> bool:
        """Whether pg_config names the groups (NCCL) rather than leaving them unnamed (gloo)."""
        return any(name for name in self.pg_ranks)

    def collectives(self, group: str) -> tuple[Entry, ...]:
        """The rank's collective entries on ``group``, oldest first."""
        return tuple(map(self.entry, self.group_index.get(group, ())))

    def status_seq(self, group: str, value: int) -> int:
        """A pg_status number of ``group`` as a collective sequence id. In op units (gloo) it is the
        sequence id of the newest collective whose op id is at most ``value``: a p2p op raises the op id
        and leaves the sequence id alone, so comparing op ids with sequence ids reads a pending
        collective after any send/recv as done."""
        if not self.op_units or value <= 0:
            return value
        seqs = self._gseq.get(group)
        if not seqs:
            return value  # the ring kept nothing of the group: the op id bounds the sequence id from above
        i = bisect.bisect_right(self._ops[group], value)  # op ids grow with the sequence ids of a group
        return seqs[i - 1] if i else seqs[0] - 1

    @cached_property
    def issued(self) -> dict[str, int]:
        """Per group, the last sequence id the rank enqueued (pg_status, else its entries)."""
        out = {g: seqs[-1] for g, seqs in self._gseq.items()}
        for pg_id, st in self.pg_status.items():
            g = self.group_of(pg_id)
            out[g] = max(out.get(g, 0), self.status_seq(g, st.last_enqueued))
        return out

    def enqueued(self, group: str) -> int:
        """The last sequence id the rank enqueued on ``group`` (pg_status, else its entries); 0 for none."""
        return self.issued.get(group, 0)

    def prepare(self) -> Dump:
        """The dump with the maps every judgement reads built now (a reading worker builds them, in parallel,
        and sends them back with the columns). Returns itself."""
        for name in _PREPARED:
            getattr(self, name)
        return self

    @cached_property
    def used(self) -> frozenset[str]:
        """The groups the rank's entries name (p2p ops too)."""
        return frozenset(k.group for k in self.kinds)

    def last(self) -> Entry | None:
        """The newest entry, or None for an empty ring."""
        return self.entry(len(self.rid) - 1) if self.rid else None

    def holes(self) -> list[str]:
        """What the ring lacks that it must hold, one phrase each: a group whose sequence ids skip one (the
        ring drops its oldest entries, never one in the middle), and a group whose pg_status counts a call in
        flight that no entry holds (the newest call is always in the ring; on gloo it can also be a p2p op,
        which gloo leaves unrecorded: either way the dump does not show what the rank waits in). A ring
        with a hole reads like a healthy one where the lost entry was the divergence or the pending call."""
        out: list[str] = []
        for g, seqs in self._gseq.items():
            if not seqs or seqs[-1] - seqs[0] + 1 == len(seqs):
                continue  # the usual ring: one entry per sequence id, none skipped (no scan of 2,000 entries)
            gone = next((a + 1 for a, b in zip(seqs, seqs[1:]) if b > a + 1), None)
            if gone is not None:
                out.append(f"#{gone} of group {g} (its ring holds #{seqs[0]} to #{seqs[-1]})")
        for pg_id, st in self.pg_status.items():
            if st.last_enqueued <= st.last_completed:
                continue
            g = self.group_of(pg_id)
            col = self._ops.get(g, []) if self.op_units else self._gseq.get(g, [])
            if not col or col[-1] <= st.last_completed:
                unit = "op" if self.op_units else "#"
                out.append(f"the call in flight on group {g} ({unit} {st.last_enqueued} by its pg_status)")
        return out


# the cached maps that prepare() builds, and that name_groups carries over (none depends on pg_names)
_PREPARED = ("_groups", "group_index", "_gseq", "_ops", "op_units", "open_index", "done_index", "used")


def indices_of(values: list, value: Any) -> list[int]:
    """Every position of ``value`` in ``values`` (``list.index`` from the last hit: a C scan, where there are
    few or none)."""
    out: list[int] = []
    j = -1
    while True:
        try:
            j = values.index(value, j + 1)
        except ValueError:
            return out
        out.append(j)


def take(col: list[int], idx: Sequence[int]) -> list[int]:
    """``col`` at the positions ``idx`` (a slice for a range; all of it, not copied, for the whole column).
    Not to be changed in place."""
    if isinstance(idx, range) and idx.step == 1:
        return col if idx.start == 0 and idx.stop == len(col) else col[idx.start : idx.stop]
    return list(map(col.__getitem__, idx))


def name_groups(dumps: list[Dump]) -> list[Dump]:
    """The dumps with their pg_ids that have no entry mapped to group names: a rank's pg_id p is the group
    other ranks' entries call p that this rank's pg_config makes it a member of, where exactly one is."""
    seen: dict[str, set[str]] = {}
    for d in dumps:
        for pg_id, g in d._groups.items():
            seen.setdefault(pg_id, set()).add(g)
    out = []
    for d in dumps:
        mine = {g for g, ranks in d.pg_ranks.items() if d.rank in ranks}
        names = {}
        for pg_id in d.pg_status:
            if pg_id in d._groups:
                continue
            cands = seen.get(pg_id, set()) & mine
            if len(cands) == 1:
                names[pg_id] = next(iter(cands))
        if names:
            new = dataclasses.replace(d, pg_names=names)
            for name in _PREPARED:  # built already, and the same whatever pg_names says
                if name in d.__dict__:
                    new.__dict__[name] = d.__dict__[name]
            d = new
        out.append(d)
    return out


def rank_of(name: str) -> str | None:
    """The rank at the end of a dump's file name (``PREFIX<rank>``), or None."""
    m = _RANK.search(name)
    return m.group(1) if m else None


def prefix_of(name: str) -> str:
    """A dump's file name without its rank: the dumps of one job share it."""
    m = _RANK.search(name)
    return name[: m.start()] if m else name


def looks_like_dump(path: str) -> bool:
    """A file whose first bytes are a pickle's or a JSON object's, and whose name ends in a rank."""
    if not _RANK.search(os.path.basename(path)):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return False
    return head[:1] == b"\x80" or head[:1] == b"{"


def load(path: str) -> Dump:
    """Read one dump. Raises DumpError with a one-line reason (truncated, foreign, code in a pickle,
    an unsupported version, no rank in the name)."""
    name = os.path.basename(path)
    m = _RANK.search(name)
    if not m:
        raise DumpError(f"{path}: cannot tell its rank: flight-recorder dumps are named PREFIX<rank>")
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise DumpError(f"{path}: {size} bytes is too large for a flight-recorder dump")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DumpError(f"{path}: cannot read it: {e.strerror}") from None
    raw, fmt = _decode(path, data)
    try:
        return _parse(path, int(m.group(1)), raw, fmt)
    except RecursionError:
        raise DumpError(f"{path}: not a flight-recorder dump (its records are nested too deeply)") from None


def _decode(path: str, data: bytes) -> tuple[dict, str]:
    if data[:1] == b"\x80":
        try:
            raw = safepickle.loads(data)
        except safepickle.UnsafePickle as e:
            raise DumpError(
                f"{path}: refused: this pickle is not a flight-recorder dump: {e}; nothing in it was run"
            ) from None
        except (
            pickle.UnpicklingError,
            EOFError,
            ValueError,
            IndexError,
            KeyError,
            TypeError,
            MemoryError,
            RecursionError,
        ) as e:
            raise DumpError(f"{path}: truncated or broken pickle ({type(e).__name__}: {e})") from None
        fmt = "pickle"
    elif data.lstrip()[:1] == b"{":
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise DumpError(f"{path}: truncated or broken JSON ({e})") from None
        fmt = "json"
    else:
        raise DumpError(f"{path}: not a flight-recorder dump (neither a pickle nor a JSON object)")
    if not isinstance(raw, dict) or "entries" not in raw or "version" not in raw:
        raise DumpError(f"{path}: not a flight-recorder dump (no 'version' and 'entries')")
    return raw, fmt


def _int(v: Any, default: int = -1) -> int:
    if type(v) is int:
        return v  # the usual case, without a try per field
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


_EMPTY: tuple = ()


def _sizes(v: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    out: list[tuple[int, ...]] = []
    for s in v:
        if not isinstance(s, (list, tuple)):
            out.append(())
        elif all(type(d) is int for d in s):
            out.append(tuple(s))  # the usual case, without a conversion per dimension
        else:
            out.append(tuple(_int(d, 0) for d in s))
    return tuple(out)


# A ring's stacks, shapes and names repeat (the same few call sites and tensors thousands of times over
# 1,024 ranks): each distinct one is converted once per load, then looked up.
_STACKS: dict[tuple, tuple[Frame, ...]] = {}
_SHAPES: dict[tuple, tuple[tuple[int, ...], ...]] = {}
_CACHE_MAX = 50_000


def _frames(v: Any) -> tuple[Frame, ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    raw = [f for f in v if isinstance(f, dict)]
    try:
        key = tuple((f.get("filename"), f.get("line"), f.get("name")) for f in raw)
        got = _STACKS.get(key)
    except TypeError:  # an unhashable value where a name or line should be: no cache
        key, got = None, None
    if got is not None:
        return got
    got = tuple(Frame(str(f.get("filename", "")), _int(f.get("line"), 0), str(f.get("name", ""))) for f in raw)
    if key is not None and len(_STACKS) < _CACHE_MAX:
        _STACKS[key] = got
    return got


def _shape(v: Any) -> tuple[tuple[int, ...], ...]:
    """``input_sizes`` / ``output_sizes`` as tuples, through a cache keyed by the lists' contents."""
    if type(v) is list and all(type(s) is list for s in v):
        try:
            key = tuple(map(tuple, v))
            got = _SHAPES.get(key)
        except TypeError:
            key, got = None, None
        if got is not None:
            return got
        got = _sizes(v)
        if key is not None and len(_SHAPES) < _CACHE_MAX:
            _SHAPES[key] = got
        return got
    return _sizes(v)


def _entry(path: str, i: int, e: Any) -> Entry:
    if type(e) is not dict:
        raise DumpError(f"{path}: entry {i} is not a record")
    get = e.get
    pg = get("process_group") or ("", "")
    pg = tuple(pg) + ("", "") if isinstance(pg, (list, tuple)) else (str(pg), "")
    prof = get("profiling_name") or ""
    if type(prof) is not str:
        prof = str(prof)
    backend, _, op = prof.rpartition(":")
    p2p = bool(get("is_p2p"))
    dtypes = get("input_dtypes") or _EMPTY
    outd = get("output_dtypes") or _EMPTY
    return Entry(
        _int(get("record_id"), i),
        str(get("pg_id", pg[0])),
        str(pg[0]),
        str(pg[1]),
        _int(get("p2p_seq_id" if p2p else "collective_seq_id")),
        _int(get("op_id")),
        p2p,
        op or prof,
        backend,
        _shape(get("input_sizes")),
        _shape(get("output_sizes")),
        tuple(d for d in dtypes if type(d) is str) if isinstance(dtypes, (list, tuple)) else (),
        str(get("state") or ""),
        bool(get("retired")),
        _int(get("time_created_ns"), 0),
        _int(get("timeout_ms"), 0),
        _frames(get("frames")),
        tuple(d for d in outd if type(d) is str) if isinstance(outd, (list, tuple)) else (),
    )


# The fields of an entry that make its Kind: the scalars (hashable: a dict key), then the lists (compared);
# and the ones that vary from entry to entry. An entry without one of them is converted in full (_entry).
_HEAD_FIELDS = ("profiling_name", "pg_id", "state", "retired", "is_p2p", "timeout_ms")
_HEAD = operator.itemgetter(*_HEAD_FIELDS)
_REST = operator.itemgetter("process_group", "input_dtypes", "input_sizes", "output_sizes", "frames")
_VARY = operator.itemgetter("record_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns")
# Kinds kept per key: a ring whose stacks or shapes differ from entry to entry would otherwise compare each
# entry with every earlier one. A key of scalars past this many kinds is widened with the input shapes (a
# ring of FSDP's all_gathers has one kind per layer, all with the same scalars); a widened key past this many
# takes no more, and its other entries are converted in full, as every entry was before kinds.
_BUCKET = 8
_WIDE: list[tuple[tuple, int]] = []  # the bucket of a widened key of scalars (never appended to)


def _widen(buckets: dict[tuple, list[tuple[tuple, int]]], head: tuple, kinds: list[tuple[tuple, int]]) -> None:
    """Key ``head``'s kinds by (head, input shapes) from now on; left as it is where a shape is unhashable."""
    wide: dict[tuple, list[tuple[tuple, int]]] = {}
    try:
        for rest, ki in kinds:
            wide.setdefault((head, tuple(map(tuple, rest[2]))), []).append((rest, ki))
    except TypeError:
        return
    buckets[head] = _WIDE
    for key, b in wide.items():
        buckets[key] = b[:_BUCKET]


def _columns(
    path: str, entries: list
) -> tuple[tuple[Kind, ...], list[int], list[int], list[int], list[int], list[int]]:
    """The entries as (kinds, kind, rid, seq, opid, tns), in the file's order. An entry whose kind fields are
    equal (==) to an earlier entry's takes that entry's Kind without converting them again: the conversion
    (``_entry``: shapes, dtypes, frames) cost four times the unpickling, and a ring repeats a few kinds
    thousands of times. Values that compare equal but convert differently (1, 1.0 and True where a name
    should be) would take the first one's conversion; torch writes none such."""
    kinds: list[Kind] = []
    buckets: dict[tuple, list[tuple[tuple, int]]] = {}
    kind: list[int] = []
    rows: list[tuple] = []  # per entry: record_id, collective_seq_id, p2p_seq_id, op_id, time_created_ns
    look = True  # off once most entries turned out to be kinds of their own (looking costs ~1 us an entry)
    for i, e in enumerate(entries):
        if type(e) is not dict:
            raise DumpError(f"{path}: entry {i} is not a record")
        ki = -1
        if not look:
            head = bucket = None
        elif len(kinds) > 128 and 2 * len(kinds) > i:  # (a ring cycling through fewer kinds keeps looking)
            look, head, bucket = False, None, None
        else:
            try:
                # output_dtypes joins the kind's fields where it is there (torch writes it since 2.x's first
                # versions; a dump without it keeps the fast path)
                head, rest, vary = _HEAD(e), (*_REST(e), e.get("output_dtypes")), _VARY(e)
                bucket = buckets.get(head)
                if bucket is _WIDE:
                    head = (head, tuple(map(tuple, rest[2])))
                    bucket = buckets.get(head)
            except (KeyError, TypeError):  # a field missing, or an unhashable value where a scalar should be
                head = bucket = None
        if bucket is not None:
            for r, k in bucket:
                if r == rest:
                    ki = k
                    break
        if ki >= 0:
            kind.append(ki)
            rows.append(vary)
            continue
        ent = _entry(path, i, e)
        # a new kind (two kinds may hold equal values: nothing needs them to be distinct, and hashing the
        # frames to find out cost more than it saved where every entry is its own kind)
        ki = len(kinds)
        kinds.append(_kind_of(ent))
        if head is not None:
            bucket = buckets.setdefault(head, [])
            if len(bucket) < _BUCKET:
                bucket.append((rest, ki))
            elif len(head) == len(_HEAD_FIELDS):  # a full key of scalars: widen it with the input shapes
                _widen(buckets, head, [*bucket, (rest, ki)])
        kind.append(ki)
        rows.append((ent.record_id, ent.seq, ent.seq, ent.op_id, ent.time_created_ns))
    if not rows:
        return (), [], [], [], [], []
    rid, cseq, pseq, opid, tns = map(list, zip(*rows))
    # the numbers as _entry reads them: ints (a JSON dump's strings converted), a default where none is
    for col, default in ((rid, None), (cseq, -1), (pseq, -1), (opid, -1), (tns, 0)):
        if set(map(type, col)) != {int}:
            for j, v in enumerate(col):
                if type(v) is not int:
                    col[j] = _int(v, j if default is None else default)
    p2p = [k.is_p2p for k in kinds]
    if any(p2p):
        seq = [q if p2p[k] else c for k, c, q in zip(kind, cseq, pseq)]
    else:
        seq = cseq
    return tuple(kinds), kind, rid, seq, opid, tns


def _parse(path: str, rank: int, raw: dict, fmt: str) -> Dump:
    version = str(raw.get("version"))
    if version.split(".", 1)[0] != SUPPORTED_MAJOR:
        raise DumpError(f"{path}: flight-recorder dump version {version} is not supported (2.x)")
    entries = raw.get("entries")
    if not isinstance(entries, list):
        raise DumpError(f"{path}: not a flight-recorder dump ('entries' is not a list)")
    kinds, kind, rid, seq, opid, tns = _columns(path, entries)
    if any(map(operator.gt, rid, rid[1:])):  # oldest first whatever the file's order (a stable sort)
        order = sorted(range(len(rid)), key=rid.__getitem__)
        kind, rid, seq, opid, tns = ([col[i] for i in order] for col in (kind, rid, seq, opid, tns))
    status: dict[str, PgStatus] = {}
    for pg_id, st in (raw.get("pg_status") or {}).items():
        if isinstance(st, dict):  # JSON dumps write the numbers as strings
            status[str(pg_id)] = PgStatus(
                _int(st.get("last_enqueued_collective")),
                _int(st.get("last_started_collective")),
                _int(st.get("last_completed_collective")),
            )
    pg_ranks: dict[str, tuple[int, ...]] = {}
    for name, cfg in (raw.get("pg_config") or {}).items():
        ranks = cfg.get("ranks") if isinstance(cfg, dict) else None
        if isinstance(ranks, str):  # "[0, 1]": torch writes the list as text
            ranks = [int(t) for t in re.findall(r"-?\d+", ranks)]
        if isinstance(ranks, list) and ranks:
            pg_ranks[str(name)] = tuple(_int(r) for r in ranks)
    stacks = any(k.frames for k in kinds)
    return Dump(rank, path, fmt, version, kinds, kind, rid, seq, opid, tns, status, pg_ranks, stacks)
