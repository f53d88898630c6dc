"""Wrappers around the public collectives of ``torch.distributed``: each call becomes a ledger line (op,
process group, its sequence numbers, shapes, dtypes, the user's call site) and, while it runs, the rank's
pending collective. Calls made by torch itself (inside another collective, or from other threads) pass
through untouched.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from typing import Any, Callable, NamedTuple

from ddpdoctor.rank import active as _active
from ddpdoctor.rank import compiled, failures, sites
from ddpdoctor.record import schema
from ddpdoctor.record.digest import COUNTED_OUT, MASK, MUL, op_hash, shapes_text
from ddpdoctor.record.writer import line

# Collectives whose tensor shapes must agree across ranks; for the others only the op is compared.
SHAPED, P2P, OTHER = schema.SHAPED, schema.P2P, schema.OTHER
WRAPPED = sorted(SHAPED | P2P | OTHER)

_Tensor: Any = None  # torch.Tensor, set by install()
_ProcessGroup: Any = None  # torch.distributed.ProcessGroup
_default_pg: Any = None  # cached once init_process_group has run
_json_cache: dict[Any, str] = {}
_op_hashes: dict[tuple, int] = {}  # (op, shapes text, file, line) -> its hash in the running digest
_wrappers: dict[str, Callable] = {}  # op -> its wrapper (install), kept while the recorder has the op
# the ops torch's flight recorder records in this job (hand_off): the recorder is their record, and a wrapper
# that a user's module still holds passes their calls straight to torch (issue 54)
_recorded: frozenset[str] = frozenset()


def _describe(args: tuple, kwargs: dict) -> tuple[list, list]:
    shapes: list = []
    dtypes: list = []
    for a in (*args, *kwargs.values()):
        items = a if isinstance(a, (list, tuple)) else (a,)
        for t in items:
            if isinstance(t, _Tensor):
                shapes.append(list(t.shape))
                dtypes.append(str(t.dtype)[6:])
                if len(shapes) >= 4:
                    return shapes, dtypes
    return shapes, dtypes


def _group_of(probe: Any, kwargs: dict, args: tuple) -> tuple[str, Any]:
    global _default_pg
    pg = kwargs.get("group")
    if pg is None:
        for a in args:
            if isinstance(a, _ProcessGroup):
                pg = a
                break
    if pg is None:
        if _default_pg is None:
            import torch.distributed as dist

            try:
                _default_pg = dist.distributed_c10d._get_default_group()
            except Exception:
                return "?", None
        pg = _default_pg
    name = getattr(pg, "group_name", None) or f"pg{id(pg)}"
    if name not in probe.groups:
        probe.groups[name] = pg
    return name, pg


def _js(value: Any) -> str:
    """JSON text of a string that recurs (file names, ops, groups), encoded once."""
    out = _json_cache.get(value)
    if out is None:
        out = _json_cache[value] = json.dumps(value)
    return out


# collectives that take async_op (NCCL runs them as async + wait so the Work is kept)
ASYNCABLE = SHAPED | {"gather", "scatter", "all_to_all", "all_to_all_single"}
_nccl: dict[int, bool] = {}


def _is_nccl(pg: Any) -> bool:
    if pg is None:
        return False
    key = id(pg)
    out = _nccl.get(key)
    if out is None:
        try:
            import torch.distributed as dist

            out = _nccl[key] = dist.get_backend(pg) == "nccl"
        except Exception:
            out = _nccl[key] = False
    return out


def ring_turned(p: Any) -> None:
    """The ledger started a new segment: the digests at the start of the oldest segment on disk move on.
    Called before the collective whose line started it is counted (a segment always starts with a
    collective's line: end lines ride uncounted in their collective's segment)."""
    p.dig_rot = p.ledger.rotations
    p.dig_ring = p.dig_seg
    p.dig_seg = dict(p.digests)


# Call sites seen before (issue 10: the wrapper's Python runs with cold caches between a backward pass and
# the next step, where every line costs several times its warm price): what does not change between calls
# from one line with one group and one tensor signature is prepared once.
_PLAIN_KW = frozenset({"group", "op", "async_op", "src", "dst", "tag", "group_src", "group_dst"})


class _Call(NamedTuple):
    """What one call line with one group and one tensor signature always writes and counts."""

    gname: str  # the process group's name
    pg: Any  # the process group (None: not found)
    shapes: list
    dtypes: list
    site: Any  # the user's [file, line, function], or None
    mid: str  # the issued line from "op" to the open sequence range
    tail: str  # ... and after it, to the end of the line
    h: int | None  # its hash in the running digest (None: a point-to-point op, counted out)
    nccl: bool  # NCCL and an op that takes async_op: issued asynchronously and waited for here
    code: Any  # the caller's code object (its id is in the cache key: checked on each hit)
    head: str  # the issued line up to its time
    end_head: str  # the end line up to its time
    end_mid: str  # ... from after its time to the first sequence number
    gjs: str  # the group's name as JSON text
    op: str


def _track(p: Any, out: Any, call: _Call, s0: int, ns: str, args: tuple, kwargs: dict) -> None:
    """Hand the Work(s) of an asynchronous call to the heartbeat's tracker."""
    works = getattr(p, "works", None)
    if works is None or out is None:
        return
    peer = kwargs.get("src", kwargs.get("dst"))
    if peer is None and call.op in P2P and len(args) > 1 and isinstance(args[1], int):
        peer = args[1]
    t0 = int(ns) / 1e9
    for w in out if isinstance(out, list) else (out,):
        if hasattr(w, "is_completed"):
            works.add(
                w,
                call.op,
                call.gname,
                s0 + 1,
                call.shapes,
                call.dtypes,
                call.site,
                t0,
                peer if isinstance(peer, int) else None,
            )


_calls: dict[tuple, _Call] = {}
_CALLS_MAX = 4096


def _site_key(op: str, args: tuple, kwargs: dict, f: Any) -> tuple | None:
    """The cache key of a plain call (one tensor first, no other tensors or lists), else None."""
    if not args:
        return None
    a0 = args[0]
    if not isinstance(a0, _Tensor):
        return None
    pg = None
    if kwargs:
        if not kwargs.keys() <= _PLAIN_KW:
            return None
        pg = kwargs.get("group")
    for a in args[1:]:
        if isinstance(a, _ProcessGroup):
            pg = a
        elif isinstance(a, (_Tensor, list, tuple)):
            return None
    return (op, id(f.f_code), f.f_lasti, pg, a0.shape, a0.dtype)  # id: a code object hashes its contents


def _prepare(p: Any, op: str, args: tuple, kwargs: dict, f: Any) -> _Call:
    """What one call writes and counts, worked out from its arguments and caller."""
    gname, pg = _group_of(p, kwargs, args)
    shapes, dtypes = _describe(args, kwargs)
    site = sites.user_site(f)
    shp = shapes_text(shapes)
    dts = "[" + ",".join(_js(d) for d in dtypes) + "]"
    st = f"[{_js(site[0])},{site[1]},{_js(site[2])}]" if site else "null"
    mid = f'"op":{_js(op)},"group":{_js(gname)},"seq":['
    tail = f'],"shapes":{shp},"dtypes":{dts},"site":{st},"st":"{schema.ST_ISSUED}"}}\n'
    h = None
    if op not in COUNTED_OUT:
        key = (op, shp, site[0], site[1]) if site else (op, shp, None, 0)
        h = _op_hashes.get(key)
        if h is None:
            h = op_hash(op, shp, site)
            if len(_op_hashes) < 4096:  # bounded: a script whose shapes change every call
                _op_hashes[key] = h
    return _Call(
        gname,
        pg,
        shapes,
        dtypes,
        site,
        mid,
        tail,
        h,
        op in ASYNCABLE and _is_nccl(pg),
        f.f_code,
        f'{{"v":{schema.LINE_VERSION},"kind":"{schema.K_COLL}","rank":{p.rank},"t":',
        f'{{"v":{schema.LINE_VERSION},"kind":"{schema.K_COLL_END}","rank":{p.rank},"t":',
        f',"group":{_js(gname)},"s0":',
        _js(gname),
        op,
    )


def _probe_error(p: Any, op: str, e: BaseException) -> None:
    """The wrapper's own bookkeeping failed: said once per op, so a report never trusts a ledger that is
    missing calls without knowing it."""
    failures.report(
        p,
        f"collective wrapper ({op})",
        "those calls ran but are not in the ledger, so a hang among them is found by timeout, not by proof",
        e,
    )


def forget_groups() -> None:
    """A new default process group (init after destroy): cached groups and call sites are stale."""
    global _default_pg
    _default_pg = None
    _calls.clear()
    _nccl.clear()


def _wrap(op: str, orig: Callable) -> Callable:
    get_ident = threading.get_ident
    getframe = sys._getframe
    now_ns = time.time_ns  # the ledger's times as decimal text of integer ns: float repr costs 3x more
    from torch.compiler import is_compiling

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # dynamo tracing into the call: the original's, as bare (rank/compiled.py); an op the recorder records:
        # torch's own record, nothing more here
        if is_compiling() or op in _recorded:
            return orig(*args, **kwargs)
        # the caller's frame, here: the rest runs off dynamo (a compiled region's eager remainder converts
        # no frame of the bookkeeping), one or more frames deeper
        return recorded(getframe(1), args, kwargs)

    @compiled.eager
    def recorded(f: Any, args: tuple, kwargs: dict) -> Any:
        p = _active.probe
        if p is None or p.depth or get_ident() != p.main_ident:
            return orig(*args, **kwargs)
        site = p.cost_collectives
        if site.due():  # one call in cost.SAMPLE: its own thread CPU time, the collective's left out
            return p.cost.timed(site, body, orig, p, f, args, kwargs)
        return body(orig, p, f, args, kwargs)

    def body(orig: Callable, p: Any, f: Any, args: tuple, kwargs: dict) -> Any:
        try:
            if not kwargs and len(args) == 1 and type(args[0]) is _Tensor:  # dist.all_reduce(t), the most common
                a0 = args[0]
                key: tuple | None = (op, id(f.f_code), f.f_lasti, None, a0.shape, a0.dtype)
            else:
                key = _site_key(op, args, kwargs, f)
            call = _calls.get(key) if key is not None else None
            if call is None or call.code is not f.f_code:  # (a freed code object's id reused)
                call = _prepare(p, op, args, kwargs, f)
                # a call whose caller is not the user's own line depends on the frames above: not cached
                if key is not None and len(_calls) < _CALLS_MAX and sites.is_user_file(f.f_code.co_filename):
                    _calls[key] = call
            pg = call.pg
            s0 = pg._get_sequence_number_for_group() if pg is not None else 0
        except Exception as e:  # never the user's problem: the call goes through, unrecorded, and it is said
            _probe_error(p, op, e)
            return orig(*args, **kwargs)
        ns = str(now_ns())
        # on the ledger before it runs: a collective that aborts the rank or never returns is still there.
        # Formatted by hand from the prepared call (json.dumps costs more than the collective's own Python);
        # its position is predicted (s0 + 1), its issue time is "t"
        p.ledger.write_bytes(f"{call.head}{ns[:-9]}.{ns[-9:]},{call.mid}{s0 + 1},{s0 + 1}{call.tail}".encode())
        # the running count and digest of this group's Python-level calls (record/digest.py)
        if p.ledger.rotations != p.dig_rot:
            ring_turned(p)
        h = call.h
        if h is not None:
            c, d = p.digests.get(call.gname, (0, 0))
            p.digests[call.gname] = (c + 1, (d * MUL ^ h) & MASK)  # one tuple: the heartbeat reads it whole
        p.pending = (call, s0, ns)  # the heartbeat's view of the call in progress
        if call.nccl or p.timeline is not None:
            return _run_traced(p, orig, call, s0, ns, args, kwargs)
        p.depth = 1
        try:
            out = orig(*args, **kwargs)
        except BaseException as e:
            p.depth = 0
            p.pending = None
            p.ncoll += 1
            _ended(p, call, s0, ns, None, args, kwargs, e)
            raise
        p.depth = 0
        p.pending = None
        p.ncoll += 1
        if out is None and pg is not None:  # the routine return, inline: one position, nothing to wait for
            try:
                s1 = pg._get_sequence_number_for_group()
            except Exception:
                s1 = None
            if s1 == s0 + 1:
                p.counters.set_ended(call.gjs, s1)
                return None
        _ended(p, call, s0, ns, out, args, kwargs)
        return out

    wrapper.__ddpdoctor_wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


def _ended(
    p: Any,
    call: _Call,
    s0: int,
    ns: str,
    out: Any,
    args: tuple,
    kwargs: dict,
    error: BaseException | None = None,
    waited: bool = False,
) -> None:
    """After the call: an end line where its return says more than "returned as predicted" (an error,
    asynchronous, a range other than one position: an *_object call, coalesced ops); else only the
    counters (a routine call's return is implied by the next ledger line, and by the counters for the
    last one). ``waited``: ddpdoctor waited for an NCCL call's Work itself (done, not asynchronous)."""
    if error is not None:
        p.ledger.append_bytes(
            line(
                schema.K_COLL_END,
                p.rank,
                group=call.gname,
                s0=s0 + 1,
                s1=None,
                err=f"{type(error).__name__}: {str(error)[:300]}",
            )
        )
        return
    pg = call.pg
    try:
        s1 = pg._get_sequence_number_for_group() if pg is not None else None
    except Exception:
        s1 = None
    # async_op=True returns a Work that completes later: kept until it does (rank/works.py)
    is_async = not waited and out is not None and (hasattr(out, "is_completed") or isinstance(out, list))
    if is_async or s1 != s0 + 1:
        t1 = str(time.time_ns())
        p.ledger.append_bytes(
            f'{call.end_head}{t1[:-9]}.{t1[-9:]}{call.end_mid}{s0 + 1},"s1":{"null" if s1 is None else s1},'
            f'"async":{"true" if is_async else "false"}}}\n'.encode()
        )
        if is_async:
            _track(p, out, call, s0, ns, args, kwargs)  # awaited since it was issued (ns)
    else:
        p.counters.set_ended(call.gjs, s0 + 1)


def _run_traced(p: Any, orig: Callable, call: _Call, s0: int, ns: str, args: tuple, kwargs: dict) -> Any:
    """The call with a profile range around it, or on NCCL (a "synchronous" call returns once it is
    enqueued: it is issued asynchronously and waited for here, the same semantics, so that its Work can be
    asked whether it completed)."""
    tok = p.timeline.start(call.op, "comm") if p.timeline is not None else None
    sync_nccl = False
    p.depth = 1
    try:
        if call.nccl and not kwargs.get("async_op"):
            kwargs["async_op"] = sync_nccl = True
        out = orig(*args, **kwargs)
        if sync_nccl:
            _track(p, out, call, s0, ns, args, kwargs)
            if out is not None:
                out.wait()
            out = None
    except BaseException as e:
        _ended(p, call, s0, ns, None, args, kwargs, e)
        raise
    finally:
        if tok is not None:
            p.timeline.end(tok)
        p.depth = 0
        p.pending = None
        p.ncoll += 1
    _ended(p, call, s0, ns, out, args, kwargs, waited=sync_nccl)
    return out


def hand_off(dist: Any, ops: frozenset[str]) -> None:
    """The collectives torch's flight recorder records in this job (``ops``: rank/flight.py ``recorded_ops``)
    leave the wrappers: ``dist``'s names are torch's own functions again, so a call costs what bare torch's
    costs, recorder included, and nothing more; the others (gloo's p2p, a backend without a recorder) keep
    their wrappers. Decided again at each new default group (an init after a destroy may change backend)."""
    global _recorded
    _recorded = ops
    for op, w in _wrappers.items():
        setattr(dist, op, w.__ddpdoctor_wrapped__ if op in ops else w)  # type: ignore[attr-defined]
    c10d = getattr(dist, "distributed_c10d", None)
    for op in ("isend", "irecv"):  # torch checks a P2POp's function by identity (install): the module's too
        w = _wrappers.get(op)
        if c10d is not None and w is not None:
            setattr(c10d, op, getattr(dist, op))


def register_with_dynamo() -> None:
    """Dynamo turns a call of a collective inside a compiled function into torch's traceable collective by
    the function's identity (``traceable_collective_remaps``): each wrapper maps where its original maps,
    so the compiled graph is bare's (and its collective does not pass the wrapper; rank/compiled.py)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed._functional_collectives import traceable_collective_remaps as remaps

    for op in WRAPPED:
        fn = getattr(dist, op, None)
        orig = getattr(fn, "__ddpdoctor_wrapped__", None)
        if orig is not None and orig in remaps:
            remaps[fn] = remaps[orig]


def install(dist: Any) -> None:
    """Wrap every public collective of ``dist`` once (idempotent)."""
    global _Tensor, _ProcessGroup, _default_pg
    import torch

    _Tensor, _ProcessGroup, _default_pg = torch.Tensor, dist.ProcessGroup, None
    for op in WRAPPED:
        fn = getattr(dist, op, None)
        if fn is None or hasattr(fn, "__ddpdoctor_wrapped__"):
            continue
        _wrappers[op] = w = _wrap(op, fn)
        setattr(dist, op, w)
    # torch checks a P2POp's function by identity against its module's own isend and irecv
    # (``dist.P2POp(dist.isend, ...)``, then ``op.op is isend`` in batch_isend_irecv): the module's names
    # must be the very wrappers the script holds, or every batched p2p raises "Invalid op" under the tool.
    # A nested call (send -> isend) is passed straight through by the wrapper (``depth``).
    c10d = getattr(dist, "distributed_c10d", None)
    for op in ("isend", "irecv"):
        fn = getattr(dist, op, None)
        if c10d is not None and getattr(c10d, op, None) is getattr(fn, "__wrapped__", None):
            setattr(c10d, op, fn)
