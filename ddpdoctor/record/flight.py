"""A rank's flight record (``ranks/<r>/flight.json``: torch's flight-recorder dump, as JSON, frames
included) read as ledger entries, so that the judges see every collective the recorder saw: DDP's bucket
all-reduces, FSDP2's all-gathers and reduce-scatters, every group's calls (issue 54). Stdlib only.

The collective wrappers (``rank/collectives.py``) still write the ledger where the recorder does not
record (p2p on gloo, torch without the bindings, a recorder switched off); an entry the wrappers wrote wins
over the recorder's entry at the same group and position (it has the user's call line even without frames).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from . import schema
from .paths import LIB_MARKERS, callers_start, from_autograd, is_user_path

# the recorder's scalar type names (c10's ScalarType) -> torch's dtype names, the ledger's spelling
FR_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2": "float8_e5m2",
}


def position(e: dict[str, Any]) -> int:
    """An entry's position on its group, in the numbering of the group's sequence number (what the ledger
    and the heartbeat use): gloo counts every op (``op_id``, p2p included), NCCL its collectives."""
    key = "op_id" if str(e.get("profiling_name", "")).startswith("gloo:") else "collective_seq_id"
    try:
        return int(e.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def op_name(e: dict[str, Any]) -> str:
    """The backend's name of an entry's op (``gloo:all_gather`` -> ``all_gather``)."""
    return str(e.get("profiling_name") or "").split(":")[-1]


def dtype_name(d: Any) -> str:
    """torch's dtype name of a recorder's scalar type name (``Float`` -> ``float32``)."""
    return FR_DTYPES.get(str(d), str(d).lower())


def user_frame(frames: Any, user_dirs: tuple[str, ...] = ()) -> list | None:
    """The innermost frame of the user's code in an entry's frames (innermost first) that called into
    torch.distributed, as a ledger site ``[file, line, function]``; None without frames (a JSON dump of torch's
    has none by design)."""
    key = _frames_key(frames)
    if key is None:
        return None
    got = _read_frames(key, user_dirs)[0]
    return list(got) if got is not None else None


def _frames_key(frames: Any) -> tuple[tuple[Any, Any, Any], ...] | None:
    """An entry's frames as a hashable key (file, line, function), innermost first; None without frames."""
    if not isinstance(frames, (list, tuple)):
        return None
    key = tuple((f.get("filename"), f.get("line"), f.get("name")) for f in frames if isinstance(f, dict))
    try:
        hash(key)
        return key
    except TypeError:  # a damaged dump's list where a name or line should be: its text
        return tuple(tuple(_hashable(v) for v in f) for f in key)


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, type(None))) else repr(v)


@functools.lru_cache(maxsize=4096)  # a ring's entries come from a few call sites: each read once
def _read_frames(key: tuple[tuple[Any, Any, Any], ...], user_dirs: tuple[str, ...]) -> tuple[tuple | None, bool]:
    """(the user's call site as :func:`user_frame` gives it, issued by autograd's engine) of one stack."""
    paths = [str(f[0] or "") for f in key]
    site = None
    for path, (_file, line, name) in list(zip(paths, key))[callers_start(paths) :]:
        if path and is_user_path(path, user_dirs, (), LIB_MARKERS):
            try:
                site = (path, int(line or 0), str(name or ""))
            except (TypeError, ValueError):
                site = None
            break
    return site, from_autograd(paths)


def entries(dump: dict[str, Any], rank: int, user_dirs: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The dump's collectives as ledger entries (issue order), each with ``"src": "flight"``. A position
    at or below the group's last completed one is done, above it issued (gloo leaves its entries'
    ``state`` at "scheduled": the group's status is what moves). p2p entries are left to the wrappers."""
    status: dict[str, Any] = dump["pg_status"] if isinstance(dump.get("pg_status"), dict) else {}
    names = ((dump.get("ddpdoctor") or {}).get("groups") or {}) if isinstance(dump.get("ddpdoctor"), dict) else {}
    # one entry per (group, position), the newest: a group destroyed and made again under the same name
    # starts its positions over, and a build whose two recorders both saw a call lists it once
    out: dict[tuple[str, int], dict[str, Any]] = {}
    raw = dump.get("entries")
    for e in raw if isinstance(raw, list) else ():
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        pos = position(e)
        gid = str(e.get("pg_id"))
        pg = e.get("process_group")
        group = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else (names.get(gid) or [gid])[0]
        st = status.get(gid)
        try:
            done = int(st.get("last_completed_collective", -1)) if isinstance(st, dict) else -1
        except (TypeError, ValueError):
            done = -1
        completed = e.get("state") == "completed" or pos <= done
        try:
            t = int(e.get("time_created_ns") or 0) / 1e9
        except (TypeError, ValueError):
            t = 0.0
        sizes = e.get("input_sizes")
        dtypes = e.get("input_dtypes")
        key = _frames_key(e.get("frames"))
        site, by_autograd = _read_frames(key, user_dirs) if key is not None else (None, False)
        out.pop((group, pos), None)
        out[(group, pos)] = {
            "v": schema.LINE_VERSION,
            "kind": schema.K_COLL,
            "rank": rank,
            "t": t,
            "t0": t,
            "op": op_name(e),
            "group": group,
            "seq": [pos, pos],
            "shapes": [list(s) if isinstance(s, (list, tuple)) else s for s in sizes]
            if isinstance(sizes, (list, tuple))
            else [],
            "dtypes": [dtype_name(d) for d in dtypes] if isinstance(dtypes, (list, tuple)) else [],
            "site": list(site) if site else None,
            # DDP's reducer's bucket all-reduce (issued from autograd's engine, not by a line of the user's):
            # the wrappers' ledger never sees these calls, and the judge reads them as DDP's internal ones
            **({"by": "autograd"} if by_autograd else {}),
            "st": schema.ST_DONE if completed else schema.ST_ISSUED,
            "src": "flight",
            # the group's description: a DeviceMesh's groups name their dimension there ("mesh_tp")
            **(
                {"gdesc": str(pg[1])}
                if isinstance(pg, (list, tuple)) and len(pg) > 1 and pg[1] not in ("", "undefined")
                else {}
            ),
        }
    return list(out.values())


def merge(ledger: list[dict[str, Any]], flight: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ledger with the recorder's entries it lacks, in issue order. A wrapper's entry at the same
    (group, position) wins; the recorder's entries older than the ledger's oldest are kept (the ledger's
    ring may be shorter than the recorder's, or empty where the wrappers stand aside)."""
    if not flight:
        return ledger
    have = set()
    for e in ledger:
        rng = e.get("seq")
        if isinstance(rng, list) and rng:
            have.add((e.get("group"), rng[0]))
    extra = [e for e in flight if (e["group"], e["seq"][0]) not in have]
    if not extra:
        return ledger
    merged = ledger + extra
    merged.sort(key=lambda e: float(e.get("t0") or e.get("t") or 0))
    return merged


def user_dirs_of(manifest: dict[str, Any], dump: dict[str, Any]) -> tuple[str, ...]:
    """The script's folder (always the user's code), as :func:`user_frame` takes it: the one the rank wrote
    into its dump, else the manifest's script where its path is absolute (a relative one is relative to
    the rank's working directory, not the reader's); else none, and the library markers decide."""
    own = dump.get("ddpdoctor")
    folder = own.get("script_dir") if isinstance(own, dict) else None
    if isinstance(folder, str) and folder.startswith(os.sep):
        return (folder.rstrip(os.sep) + os.sep,)
    path = manifest.get("script_path") or manifest.get("script")
    if isinstance(path, str) and path.startswith(os.sep):
        return (os.path.dirname(path) + os.sep,)
    return ()
