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
import os
import pickle
import re
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


class Entry(NamedTuple):
    """One recorded collective or p2p op of one rank (one ``entries`` item). A NamedTuple, not a frozen
    dataclass: a 1,024-rank job has two million of them, and a frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field) cost more than unpickling the entry."""

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

    def call(self) -> str:
        """``all_reduce([8])``: the op and its input shapes, as the report shows it."""
        sizes = ",".join("x".join(map(str, s)) or "scalar" for s in self.input_sizes)
        return f"{self.op}([{sizes}])" if self.input_sizes else self.op


@dataclass(frozen=True)
class PgStatus:
    last_enqueued: int
    last_started: int
    last_completed: int


@dataclass(frozen=True)
class Dump:
    """One rank's dump."""

    rank: int
    path: str
    fmt: str  # pickle | json
    version: str
    entries: tuple[Entry, ...]
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

    @cached_property
    def _groups(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for e in self.entries:
            out.setdefault(e.pg_id, e.group)
        return out

    @cached_property
    def _by_group(self) -> dict[str, tuple[Entry, ...]]:
        out: dict[str, list[Entry]] = {}
        for e in self.entries:
            if not e.is_p2p:
                out.setdefault(e.group, []).append(e)
        return {g: tuple(v) for g, v in out.items()}

    @cached_property
    def _by_key(self) -> dict[tuple[str, int], tuple[Entry, ...]]:
        out: dict[tuple[str, int], list[Entry]] = {}
        for e in self.entries:
            if not e.is_p2p:
                out.setdefault((e.group, e.seq), []).append(e)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def signatures(self) -> dict[tuple[str, int], tuple]:
        """Per (group, seq): the (op, input sizes, dtypes) of every op there, a coalesced group's ``coalesced``
        closing entry left out; what must agree across ranks. Built in one pass (1,024 ranks' rings)."""
        out: dict[tuple[str, int], list] = {}
        for e in self.entries:
            if not e.is_p2p and not e.op.endswith("coalesced"):
                out.setdefault((e.group, e.seq), []).append((e.op, e.input_sizes, e.dtypes))
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def completed(self) -> tuple[bool, ...]:
        """Per entry (aligned with ``entries``): whether this rank's own records show it completed. gloo
        never moves an entry's state past "scheduled"; retired means no longer watched, the only word a p2p op
        (or a group without pg_status) has; pg_status counts op ids on gloo (p2p ops too) and sequence ids on
        NCCL, compared like with like."""
        out = []
        ops = self.op_units
        for e in self.entries:
            st = self.pg_status.get(e.pg_id)
            if e.is_p2p or st is None:
                out.append(e.state == "completed" or e.retired)
            else:
                out.append((e.op_id if ops else e.seq) <= st.last_completed)
        return tuple(out)

    def at(self, group: str, seq: int) -> tuple[Entry, ...]:
        """The rank's collective entries with this (group, sequence id): one, or a coalesced group's."""
        return self._by_key.get((group, seq), ())

    @cached_property
    def op_units(self) -> bool:
        """Whether pg_status counts op ids (gloo: ``last_enqueued_collective`` is the op id, which counts
        p2p ops too) rather than collective sequence ids (NCCL). Read from the newest entry of each group
        that tells them apart; else from the backend."""
        for e in reversed(self.entries):
            st = self.pg_status.get(e.pg_id)
            if st is None or e.is_p2p or e.op_id == e.seq:
                continue
            if st.last_enqueued == e.op_id:
                return True
            if st.last_enqueued == e.seq:
                return False
        return any(e.backend == "gloo" for e in self.entries)

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
        return self._by_group.get(group, ())

    @cached_property
    def _ops(self) -> dict[str, list[int]]:
        return {g: [e.op_id for e in ents] for g, ents in self._by_group.items()}

    def status_seq(self, group: str, value: int) -> int:
        """A pg_status number of ``group`` as a collective sequence id. In op units (gloo) it is the
        sequence id of the newest collective whose op id is at most ``value``: a p2p op raises the op id
        and leaves the sequence id alone, so comparing op ids with sequence ids reads a pending
        collective after any send/recv as done."""
        if not self.op_units or value <= 0:
            return value
        ents = self.collectives(group)
        if not ents:
            return value  # the ring kept nothing of the group: the op id bounds the sequence id from above
        i = bisect.bisect_right(self._ops[group], value)  # op ids grow with the sequence ids of a group
        return ents[i - 1].seq if i else ents[0].seq - 1

    @cached_property
    def _enqueued(self) -> dict[str, int]:
        out = {g: ents[-1].seq for g, ents in self._by_group.items()}
        for pg_id, st in self.pg_status.items():
            g = self.group_of(pg_id)
            out[g] = max(out.get(g, 0), self.status_seq(g, st.last_enqueued))
        return out

    def enqueued(self, group: str) -> int:
        """The last sequence id the rank enqueued on ``group`` (pg_status, else its entries); 0 for none."""
        return self._enqueued.get(group, 0)


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
        out.append(dataclasses.replace(d, pg_names=names) if names else d)
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
    return _parse(path, int(m.group(1)), raw, fmt)


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
    )


def _parse(path: str, rank: int, raw: dict, fmt: str) -> Dump:
    version = str(raw.get("version"))
    if version.split(".", 1)[0] != SUPPORTED_MAJOR:
        raise DumpError(f"{path}: flight-recorder dump version {version} is not supported (2.x)")
    entries = raw.get("entries")
    if not isinstance(entries, list):
        raise DumpError(f"{path}: not a flight-recorder dump ('entries' is not a list)")
    parsed = tuple(sorted((_entry(path, i, e) for i, e in enumerate(entries)), key=lambda x: x.record_id))
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
    stacks = any(e.frames for e in parsed)
    return Dump(rank, path, fmt, version, parsed, status, pg_ranks, stacks)
