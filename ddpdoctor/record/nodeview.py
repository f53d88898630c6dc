"""What one node's ddpdoctor tells the others through the job store: the values and their checks. Stdlib only.

Every value is one JSON object ``{"schema": ..., "v": NODE_VERSION, "job": JOB_ID, ...}``; :func:`parse`
ignores (with a note) a value of another job, another schema or an unknown version, and anything that is not
such an object. Nothing is ever unpickled or evaluated.

- ``node``: the live summary of a node's ranks, about once a second (:func:`rank_summary` per rank: the last
  heartbeat, when its sequence numbers and its progress last moved, its start/init/finish events, its error
  in short, its newest ledger entries). :func:`rank_from_summary` turns one back into a
  :class:`~ddpdoctor.record.reader.RankRecord`, so the live detectors run over every node's ranks unchanged.
- ``final``: a node's run directory after its run ended, bounded (:func:`bundle_run`): the rank files' tails,
  their flight records whole, its manifest and monitor log. :func:`write_mirror` writes one into ``RUN_DIR/nodes/<n>/`` as a run directory
  of its own, which :mod:`~ddpdoctor.record.mirror` reads with the node's own ranks.
- ``verdict``: the judging node's live verdict and the job's nodes (host, node rank, ranks).
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from typing import Any

from . import schema
from .reader import RankRecord

NODE_VERSION = 2  # 2: a rank summary's ledger entries are one JSON text, decoded only when needed
S_NODE = "ddpdoctor.node"  # live summary of one node
S_FINAL = "ddpdoctor.node-final"  # one node's records after its run ended
S_VERDICT = "ddpdoctor.job-verdict"  # the judging node's verdict (and the job's nodes)
S_DONE = "ddpdoctor.job-done"  # the judging node gathered every final it will get

MIRRORS_DIR = "nodes"  # RUN_DIR/nodes/<node>/: the other nodes' records, as run directories
LIVE_ONLY = "live.json"  # RUN_DIR/nodes/<node>/live.json: a lost node's last live summary

_HB_KEYS = (
    "t",
    "step",
    "ncoll",
    "seq",
    "pending",
    "awaiting",
    "where",
    "in_backward",
    "in_ddp_forward",
    "final",
    "cpu",
    "cost",  # ddpdoctor's own account (rank/cost.py): a lost node's ranks still state their cost
)
_EVENT_KINDS = (schema.K_START, schema.K_INIT, schema.K_FINISH, schema.K_JOIN, schema.K_ORPHANED)
_LEDGER_KEYS = ("kind", "t", "op", "group", "seq", "shapes", "dtypes", "site", "st", "peer", "err")
LIVE_LEDGER = 6  # the newest ledger entries a live summary carries (the deadlock proof looks near the end)
TEXT_CAP = 4096  # faulthandler dumps and messages in a live summary

# the tails of a rank's files a final bundle carries (bytes; a truncated file starts at a whole line)
_FILE_CAPS = {
    schema.EVENTS: 256 << 10,
    schema.HEARTBEAT: 32 << 10,
    schema.LEDGER: 512 << 10,
    "ledger.prev.jsonl": 256 << 10,
    schema.STACKS: 512 << 10,
    schema.CHECKS: 512 << 10,
    schema.TIMELINE: 2 << 20,
    schema.MEMORY: 512 << 10,
    schema.FINGERPRINTS: 128 << 10,
    schema.COUNTERS: 16 << 10,
    schema.ERROR: 64 << 10,
    schema.FATAL: 64 << 10,
    schema.TERMINATED: 64 << 10,
}
# a rank's files a final bundle carries whole or not at all (JSON: a tail would not parse). flight.json is the
# record of every collective of a rank that left its calls to torch's recorder (the default): without it the
# judging node knows of another node's ranks only their heartbeats' positions and pending calls
_WHOLE_FILES = {schema.FLIGHT: 8 << 20}
_RUN_FILES = {schema.MANIFEST: 64 << 10, schema.MONITOR: 256 << 10}
STDERR_CAP = 16 << 10


def envelope(kind: str, job: str, **fields: Any) -> bytes:
    """One store value: JSON with its schema, version and job id."""
    return json.dumps({"schema": kind, "v": NODE_VERSION, "job": job, **fields}, separators=(",", ":")).encode()


def node_value(job: str, **fields: Any) -> bytes:
    """A node's live value: its header (everything but ``ranks``: the node, its clock, ``hot``, its ranks'
    ids, which of them still run, its dump acknowledgement) as one JSON line, then ``{"ranks": [...]}``. The
    judge reads every node's header each second, and decodes the ranks only when it looks at the job (while
    a verdict may be near, else every few seconds): 1,024 ranks' summaries are 1.8 MB of JSON."""
    ranks = fields.pop("ranks", None) or []
    fields.setdefault("rids", [x.get("r") for x in ranks if isinstance(x, dict)])
    fields.setdefault(
        "running",
        [
            x.get("r")
            for x in ranks
            if isinstance(x, dict) and not any(e.get("kind") == schema.K_FINISH for e in x.get("ev") or ())
        ],
    )
    body = json.dumps({"ranks": ranks}, separators=(",", ":")).encode()
    return envelope(S_NODE, job, **fields) + b"\n" + body  # JSON never holds a raw newline: the split is safe


def node_ranks(doc: dict[str, Any]) -> list[Any]:
    """The rank summaries of a node's value (decoded from its second line on first use, then kept)."""
    body = doc.pop("_body", None)
    if body is not None:
        try:
            got = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            got = None
        doc["ranks"] = got.get("ranks") if isinstance(got, dict) and isinstance(got.get("ranks"), list) else []
    ranks = doc.get("ranks")
    return ranks if isinstance(ranks, list) else []


def parse(raw: bytes | str | None, kind: str, job: str) -> tuple[dict[str, Any] | None, str | None]:
    """(value, None) for a value of this job, schema and version; (None, note) for anything else. A node's
    value (:func:`node_value`): its header is decoded, its ranks are kept for :func:`node_ranks`."""
    if raw is None:
        return None, None
    body = None
    if kind == S_NODE:
        nl = b"\n" if isinstance(raw, bytes) else "\n"
        raw, sep, rest = raw.partition(nl)  # type: ignore[arg-type]
        body = rest if sep else None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None, f"ignored a {kind} value that is not JSON"
    if not isinstance(doc, dict) or doc.get("schema") != kind:
        return None, f"ignored a value that is not a {kind} record"
    if doc.get("v") != NODE_VERSION:
        return None, f"ignored a {kind} value of version {doc.get('v')!r} (this ddpdoctor reads {NODE_VERSION})"
    if doc.get("job") != job:
        return None, f"ignored a {kind} value of another job id ({str(doc.get('job'))[:40]!r}, this job {job!r})"
    if body is not None:
        doc["_body"] = body
    return doc, None


def _cut(text: str, cap: int = TEXT_CAP) -> str:
    return text if len(text) <= cap else text[:cap]


def rank_summary(rec: RankRecord) -> dict[str, Any]:
    """A compact, JSON-ready summary of one rank for the live view (a few hundred bytes)."""
    hb = {k: rec.last_hb.get(k) for k in _HB_KEYS} if rec.last_hb else None
    events = [e for k in _EVENT_KINDS if (e := rec.event(k)) is not None]
    err: dict[str, Any] | None = None
    if rec.error:
        err = {k: rec.error.get(k) for k in ("type", "user_frame", "op", "fatal") if k in rec.error}
        err["message"] = _cut(str(rec.error.get("message", "")), 600)
    # one JSON text, not a list: the judge of a job decodes a thousand ranks' values a second, and needs
    # their ledgers only while some rank waits (the deadlock proof): parsed as a string, they cost nothing
    ledger = json.dumps(
        [{k: e[k] for k in _LEDGER_KEYS if k in e} for e in rec.ledger[-LIVE_LEDGER:]], separators=(",", ":")
    )
    return {
        "r": rec.rank,
        "hb": hb,
        "n_hb": rec.n_hb,
        "sct": rec.seq_changed_t,
        "pt": rec.progress_t,
        "ev": events,
        "err": err,
        "ctr": {k: rec.counters[k] for k in ("ddp_fwd", "ended") if k in rec.counters},
        "led": ledger,
        "fatal": _cut(rec.fatal),
        "term": _cut(rec.terminated),
    }


def _shifted(t: Any, shift: float) -> Any:
    return t + shift if shift and isinstance(t, (int, float)) else t


def _shift_wait(w: Any, shift: float) -> Any:
    """A pending/awaiting collective with its ``since`` moved by ``shift`` (a copy; ``w`` is kept)."""
    if shift and isinstance(w, dict) and isinstance(w.get("since"), (int, float)):
        return dict(w, since=w["since"] + shift)
    return w


def summary_ledger(d: dict[str, Any]) -> list[dict[str, Any]]:
    """The ledger entries of a rank summary (``led``: a JSON text, or a list as version 1 wrote it)."""
    led = d.get("led")
    if isinstance(led, str):
        try:
            led = json.loads(led)
        except ValueError:
            return []
    return [e for e in led or () if isinstance(e, dict)] if isinstance(led, list) else []


def rank_from_summary(d: dict[str, Any], shift: float = 0.0, ledger: bool = True) -> RankRecord | None:
    """A RankRecord from :func:`rank_summary` (None when ``d`` is not one); ``ledger=False`` leaves its
    ledger out (empty, ``ledger_trimmed``): a view that nothing waits in needs none. ``shift`` is added to the times
    the live detectors measure durations from (the heartbeat's time, its waits' ``since``, when the sequence
    numbers and the progress last moved, the finish event's time): the judge passes ``now - t`` of the
    node's value, so that a rank's waits are as long as they were when its node published them, however
    late the judge reads them and whatever the two clocks say."""
    try:
        rank = int(d["r"])
    except (KeyError, TypeError, ValueError):
        return None
    hb = d.get("hb")
    if isinstance(hb, dict) and hb:
        hb = dict(hb, rank=rank, kind=schema.K_HB)  # one copy (the judge rebuilds a thousand ranks a second)
        if shift:
            hb["t"] = _shifted(hb.get("t"), shift)
            if hb.get("pending"):
                hb["pending"] = _shift_wait(hb["pending"], shift)
            if hb.get("awaiting"):
                hb["awaiting"] = _shift_wait(hb["awaiting"], shift)
    else:
        hb = None
    ev = d.get("ev") or []
    ev = [e for e in ev if isinstance(e, dict)] if isinstance(ev, list) else []
    if shift and any(e.get("kind") == schema.K_FINISH for e in ev):
        ev = [dict(e, t=_shifted(e.get("t"), shift)) if e.get("kind") == schema.K_FINISH else e for e in ev]
    led = [dict(e, rank=rank) for e in summary_ledger(d)] if ledger else []
    ctr = d.get("ctr")
    return RankRecord(
        rank=rank,
        events=ev,
        last_hb=hb,
        n_hb=int(d.get("n_hb") or 0),
        seq_changed_t=_shifted(d.get("sct"), shift),
        progress_t=_shifted(d.get("pt"), shift),
        ledger=led,
        ledger_trimmed=bool(led) or not ledger,
        error=d.get("err") if isinstance(d.get("err"), dict) else None,
        counters=ctr if isinstance(ctr, dict) else {},
        fatal=str(d.get("fatal") or ""),
        terminated=str(d.get("term") or ""),
    )


def _tail_bytes(path: str, cap: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - cap))
            data = f.read(cap)
    except OSError:
        return None
    data = data.rstrip(b"\0")  # the memory-mapped ledger's unwritten rest
    if size > cap:
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else b""
    return data


def _whole_bytes(path: str, cap: int) -> bytes | None:
    """The file whole, or None where it is missing or over ``cap`` bytes."""
    try:
        if os.path.getsize(path) > cap:
            return None
        with open(path, "rb") as f:
            return f.read(cap + 1)[:cap]
    except OSError:
        return None


def bundle_run(run_dir: str, ranks: list[int]) -> dict[str, Any]:
    """This node's records after its run, bounded (see the caps above), compressed (zlib, base64 in JSON)."""
    files: dict[str, bytes] = {}
    for name, cap in _RUN_FILES.items():
        if (b := _tail_bytes(os.path.join(run_dir, name), cap)) is not None:
            files[name] = b
    for r in ranks:
        d = os.path.join(run_dir, schema.RANKS_DIR, str(r))
        for name, cap in _FILE_CAPS.items():
            b = _tail_bytes(os.path.join(d, name), cap)
            if b:
                files[f"{schema.RANKS_DIR}/{r}/{name}"] = b
        for name, cap in _WHOLE_FILES.items():
            b = _whole_bytes(os.path.join(d, name), cap)
            if b:
                files[f"{schema.RANKS_DIR}/{r}/{name}"] = b
    for root, _dirs, names in os.walk(os.path.join(run_dir, schema.LOGS_DIR)):
        local = os.path.basename(root)
        if "stderr.log" in names and local.isdigit():
            b = _tail_bytes(os.path.join(root, "stderr.log"), STDERR_CAP)
            if b:
                files[f"{schema.LOGS_DIR}/mirror/{local}/stderr.log"] = b
    packed = zlib.compress(json.dumps({k: v.decode("utf-8", "replace") for k, v in files.items()}).encode(), 6)
    return {"files": base64.b64encode(packed).decode("ascii"), "n": len(files)}


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(parts) and all(p not in ("", ".", "..") for p in parts) and not rel.startswith("/")


def write_mirror(dest: str, bundle: dict[str, Any]) -> int:
    """Write a final bundle into ``dest`` (0700) as a run directory; the number of files written. A name
    that would leave ``dest`` is skipped; a bundle that does not decode writes nothing."""
    try:
        files = json.loads(zlib.decompress(base64.b64decode(str(bundle.get("files") or ""))))
    except (ValueError, zlib.error, TypeError):
        return 0
    if not isinstance(files, dict):
        return 0
    n = 0
    for rel, text in files.items():
        if not (isinstance(rel, str) and isinstance(text, str) and _safe(rel)):
            continue
        path = os.path.join(dest, *rel.split("/"))
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        n += 1
    return n


def write_live_mirror(dest: str, node: dict[str, Any]) -> None:
    """A lost node: its last live summary (it left no final records) as ``dest/live.json``."""
    node = dict(node, ranks=node_ranks(node))
    node.pop("_body", None)
    os.makedirs(dest, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(dest, LIVE_ONLY), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(node, f)
