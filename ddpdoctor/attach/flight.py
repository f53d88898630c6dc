"""Take torch's flight-recorder (FR) state from the running ranks ``attach`` found, where the job exposes a
trigger, into ``<run dir>/fr/rank_<r>``; else say in one line why only stacks were taken.

What torch 2.13 offers (read from its source; docs/attach.md has the details):

- **torch's debug server** (``torch.distributed.debug.start_debug_server()``, started by the job): every rank
  runs a worker HTTP server (threads named ``pt_workerserver``) and registers ``http://<host>:<port>`` in the
  job's TCPStore (``MASTER_ADDR:MASTER_PORT``) under ``debug_server/rank<N>``. ``POST /handler/fr_trace_json``
  gives the FR as JSON (every backend, gloo too: it works on CPU); CUDA builds add
  ``/handler/dump_nccl_trace_pickle`` (NCCL's ring, with stacks). ``GET /handler/`` lists the handlers. The
  same handlers are served on a Unix socket where the script runs under
  ``torch.distributed.elastic.control_plane.worker_main()`` with ``TORCH_WORKER_SERVER_SOCKET`` set.
- **NCCL's dump pipe**: with ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<stem>`` (and ``TORCH_NCCL_TRACE_BUFFER_SIZE``
  > 0, default 2000), the heartbeat monitor of the rank's first NCCL group creates the FIFO
  ``<stem><rank>.pipe`` (``mkfifo``, opened ``O_RDONLY|O_NONBLOCK``) and reads it every
  ``TORCH_NCCL_COORD_CHECK_MILSEC`` (1 s; every ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``, 480 s, when
  ``TORCH_NCCL_DUMP_ON_TIMEOUT=0``; none with ``TORCH_NCCL_BLOCKING_WAIT=1``, which starts no watchdog and so no
  monitor). Any bytes written make it dump (pickle, with stacks) to
  ``TORCH_FR_DUMP_TEMP_FILE<rank>`` (old name ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``; default
  ``~/.cache/torch/comm_lib_trace_rank_<rank>``), written in place (no rename): the file is taken once it
  stopped growing and reads as a whole dump. The job goes on.
- **gloo** has no trigger of its own: only its watchdog-less ``_dump_fr_trace()`` from inside the process.

Nothing taken is ever run: each dump is checked with the post-mortem's reader (a pickle resolves no global).
Every wait is bounded (one deadline for the whole job); every file a rank names is read through
``/proc/<pid>/root`` (its own mount namespace) and only if it belongs to this user.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from ddpdoctor.attach.discover import Job, RankProc
from ddpdoctor.postmortem import flight
from ddpdoctor.record import schema

MAX_DUMP = 256 << 20  # bytes taken from one rank (a 20000-entry ring with stacks is ~50 MB)
FR_ON = "TORCH_FR_BUFFER_SIZE=2000"
DEBUG_SERVER = "torch.distributed.debug.start_debug_server()"
PIPE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
_STABLE = 0.3  # seconds a dump file must keep its size before it is read (torch writes it in place)

# Run with the rank's own Python (it has torch): the addresses the ranks' worker servers registered in the job's
# TCPStore, read with ``check`` first so that nothing waits for a key that is not there.
_STORE_QUERY = """
import datetime, json, sys
import torch.distributed as dist
s = dist.TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, timeout=datetime.timedelta(seconds=float(sys.argv[3])))
out = {}
for k in sys.argv[4:]:
    if s.check([k]):
        out[k] = s.get(k).decode("utf-8", "replace")
print("DDPDOCTOR-STORE " + json.dumps(out))
"""


@dataclass
class Taken:
    """What attach got from one rank's flight recorder."""

    rank: int
    how: str = ""  # "torch's debug server" | "torch's worker socket" | "NCCL's dump pipe"; "" when none was taken
    path: str = ""  # the dump in the run directory
    fmt: str = ""  # pickle | json
    entries: int = 0
    why: str = ""  # when nothing was taken: why, and what would turn it on


@dataclass
class Outcome:
    """The flight-recorder part of one attach: per rank what was taken, and the report's one line."""

    taken: list[Taken] = field(default_factory=list)
    earlier: list[str] = field(default_factory=list)  # dump files the job had written before, kept
    note: str = ""

    def as_manifest(self) -> dict[str, Any]:
        """The manifest's ``attach.fr`` (what ``analyze`` of the run directory shows again)."""
        return {
            "note": self.note,
            "earlier": self.earlier,
            "ranks": {
                str(t.rank): {"how": t.how, "file": t.path, "format": t.fmt, "entries": t.entries, "why": t.why}
                for t in self.taken
            },
        }


def ring_size(env: dict[str, str]) -> int | None:
    """The FR ring the rank's torch was told to keep (TORCH_FR_BUFFER_SIZE, then its old NCCL name, as
    torch's getCvarInt reads them); None: unset, torch's default (2000 entries in torch 2.13)."""
    for key in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        if key in env:
            try:
                return int(env[key])
            except ValueError:
                return None
    return None


def threads(pid: int) -> set[str]:
    """The names of a process's threads (``/proc/<pid>/task/*/comm``): torch names its helper threads
    (``pt_workerserver``, ``pt_nccl_watchdg``, ``pt_nccl_heartbt``), which tells from outside what runs."""
    names: set[str] = set()
    try:
        tids = os.listdir(f"/proc/{pid}/task")[:4096]
    except OSError:
        return names
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
                names.add(f.read(64).strip())
        except OSError:
            continue  # a thread that just ended
    return names


def in_rank(rp: RankProc, path: str) -> str:
    """``path`` as the rank sees it (relative to its cwd, inside its root), as this process can open it."""
    path = os.path.join(rp.cwd, path) if not os.path.isabs(path) else path
    try:
        root = os.readlink(f"/proc/{rp.pid}/root")
    except OSError:
        root = "/"
    return path if root == "/" else os.path.join(f"/proc/{rp.pid}/root", path.lstrip("/"))


def dump_file(rp: RankProc) -> str:
    """Where the rank's torch writes its dump: TORCH_FR_DUMP_TEMP_FILE<rank> (DebugInfoWriter), the exact
    name with TORCH_FR_DUMP_DYNAMIC_FILE_NAME=1, else ``$XDG_CACHE_HOME`` or ``~/.cache``
    ``/torch/comm_lib_trace_rank_<rank>``."""
    env = rp.env
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if prefix and env.get("TORCH_FR_DUMP_DYNAMIC_FILE_NAME", "").lower() in ("1", "true", "yes", "on"):
        return in_rank(rp, env.get("TORCH_FR_DUMP_TEMP_FILE") or prefix)
    if not prefix:
        cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "/tmp", ".cache")
        prefix = os.path.join(cache, "torch", "comm_lib_trace_rank_")
    return in_rank(rp, f"{prefix}{rp.rank}")


def _mine(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid()


# -- torch's debug server ---------------------------------------------------------------------------------------


class _UnixHTTP(http.client.HTTPConnection):
    """HTTP over a Unix socket (torch's worker server under ``worker_main()``)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def _request(conn: http.client.HTTPConnection, method: str, path: str) -> tuple[int, bytes]:
    try:
        conn.request(method, path, body=b"" if method == "POST" else None)
        resp = conn.getresponse()
        data = resp.read(MAX_DUMP + 1)
        return resp.status, data
    finally:
        conn.close()


def _handlers(connect: Any) -> list[str] | None:
    """The worker server's handler names (``GET /handler/``), or None where it does not say."""
    try:
        status, data = _request(connect(), "GET", "/handler/")
        names = json.loads(data) if status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    return [str(n) for n in names] if isinstance(names, list) else None


def _from_server(connect: Any, out: str) -> tuple[str, str]:
    """Ask a worker server for the rank's FR; write it to ``out``. (format, error)."""
    names = _handlers(connect)
    # NCCL's ring (with stacks) where this torch has NCCL, then the generic recorder (gloo's, JSON, no stacks)
    order = [h for h in ("dump_nccl_trace_pickle", "fr_trace_json") if names is None or h in names]
    if not order:
        return "", "its debug server has no flight-recorder handler (" + ", ".join(names or ()) + ")"
    why = ""
    for h in order:
        try:
            status, data = _request(connect(), "POST", f"/handler/{h}")
        except (OSError, http.client.HTTPException) as e:
            why = f"its debug server did not answer /handler/{h}: {e}"
            continue
        if status != 200 or len(data) > MAX_DUMP:
            why = f"its debug server answered /handler/{h} with HTTP {status} ({len(data)} bytes)"
            continue
        fmt, err, entries = _keep(data, out)
        if err:
            why = f"/handler/{h}: {err}"
            continue
        if entries or h == order[-1]:
            return fmt, ""
        # an empty NCCL ring in a job whose collectives are on gloo: the generic recorder has them
    return "", why


def _registered(job: Job, ranks: list[RankProc], timeout: float) -> tuple[dict[int, str], str]:
    """rank -> ``http://host:port`` its worker server registered in the job's TCPStore, read with the rank's own
    Python (torch's TCPStore client; bounded). ("", why) when the store cannot be asked."""
    env = ranks[0].env
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not addr or not port:
        return {}, "its environment names no MASTER_ADDR/MASTER_PORT (the job's TCPStore)"
    keys = [f"debug_server/rank{r.rank}" for r in ranks]
    # the rank's argv[0] first: a venv's python is a symlink, and only its own path finds the venv's torch
    exes = [ranks[0].cmdline[0]] if ranks[0].cmdline and os.path.isabs(ranks[0].cmdline[0]) else []
    try:
        exes.append(psutil.Process(ranks[0].pid).exe())
    except psutil.Error:
        pass
    exes = list(dict.fromkeys(exes + [sys.executable]))  # each once, in that order
    why = ""
    for exe in exes:
        try:
            cp = subprocess.run(
                [exe, "-c", _STORE_QUERY, addr, port, str(max(1.0, timeout / 2)), *keys],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd="/",  # `python -c` puts the cwd first on sys.path: nothing of the job's folder shadows torch
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            why = f"asking the job's TCPStore ({addr}:{port}) took over {timeout:g} s"
            continue
        except OSError as e:
            why = f"cannot run {exe}: {e.strerror or e}"
            continue
        line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("DDPDOCTOR-STORE ")), None)
        if line is None:
            err = (cp.stderr or "").strip().splitlines()
            why = f"cannot ask the job's TCPStore ({addr}:{port}): {err[-1][:200] if err else 'no answer'}"
            continue
        try:
            got = json.loads(line.split(" ", 1)[1])
        except ValueError:
            got = {}
        return {r.rank: got[f"debug_server/rank{r.rank}"] for r in ranks if f"debug_server/rank{r.rank}" in got}, ""
    return {}, why


def _loopback(rp: RankProc, url: str) -> tuple[str, int] | None:
    """Where to reach the registered worker server: its port must be one the rank itself listens on (so a
    stale key of an earlier job, or a rank of another node, is never asked); the loopback of its address."""
    try:
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        conns = psutil.Process(rp.pid).net_connections("tcp")
    except (ValueError, IndexError, psutil.Error):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            ip = c.laddr.ip
            host = {"::": "::1", "0.0.0.0": "127.0.0.1", "": "127.0.0.1"}.get(ip, ip)
            return host, port
    return None


def _debug_server(job: Job, ranks: list[RankProc], out_dir: str, deadline: float, taken: dict[int, Taken]) -> None:
    """Take the FR of every rank that runs torch's worker server (TCP, registered in the store; or a Unix socket)."""
    tcp: list[RankProc] = []
    for rp in ranks:
        sock = rp.env.get("TORCH_WORKER_SERVER_SOCKET")
        path = in_rank(rp, sock) if sock else ""
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        if st is not None and stat.S_ISSOCK(st.st_mode) and _mine(st):
            left = max(1.0, deadline - time.monotonic())
            _take_server(rp, lambda p=path, t=left: _UnixHTTP(p, t), "torch's worker socket", out_dir, taken)
        else:
            tcp.append(rp)
    if not tcp:
        return
    urls, why = _registered(job, tcp, max(2.0, min(30.0, deadline - time.monotonic())))
    for rp in tcp:
        if rp.rank not in urls:
            taken[rp.rank].why = why or "its worker server is not registered in the job's TCPStore"
            continue
        where = _loopback(rp, urls[rp.rank])
        if where is None:
            taken[rp.rank].why = f"the address it registered ({urls[rp.rank]}) is not a port it listens on"
            continue
        host, port = where
        left = max(1.0, deadline - time.monotonic())
        _take_server(
            rp,
            lambda h=host, p=port, t=left: http.client.HTTPConnection(h, p, timeout=t),
            "torch's debug server",
            out_dir,
            taken,
        )


def _take_server(rp: RankProc, connect: Any, how: str, out_dir: str, taken: dict[int, Taken]) -> None:
    out = os.path.join(out_dir, f"rank_{rp.rank}")
    fmt, why = _from_server(connect, out)
    t = taken[rp.rank]
    if fmt:
        t.how, t.path, t.fmt, t.entries, t.why = how, out, fmt, _entries(out), ""
    else:
        t.why = why


# -- NCCL's dump pipe -------------------------------------------------------------------------------------------


def open_pipe(pipe: str) -> tuple[int, str]:
    """Open a rank's dump FIFO for writing without blocking: (fd, "") where a reader holds it open, else
    (-1, why not). Only a FIFO of this user (never a regular file, a symlink or someone else's pipe)."""
    try:
        st = os.lstat(pipe)
    except OSError:
        return -1, f"{pipe} does not exist (the rank has no NCCL process group yet, or its torch predates the pipe)"
    if not stat.S_ISFIFO(st.st_mode) or not _mine(st):
        return -1, f"{pipe} is not a named pipe of this user"
    try:
        return os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW), ""
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO without a reader: no heartbeat monitor holds it open
            return -1, f"nothing reads {pipe} (the NCCL process group that made it is gone)"
        return -1, f"cannot open {pipe}: {e.strerror}"


def write_pipe(fd: int, pipe: str) -> str:
    """Ask for one dump through an open FIFO (any bytes do; torch reads up to 128) and close it; "" or why not."""
    try:
        os.write(fd, b"ddpdoctor attach\n")
    except OSError as e:
        return f"cannot write {pipe}: {e.strerror}"
    finally:
        os.close(fd)
    return ""


def poke(pipe: str) -> str:
    """Open and write a rank's dump FIFO: "" when written, else why not."""
    fd, why = open_pipe(pipe)
    return why or write_pipe(fd, pipe)


def _sig(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) and _mine(st) else None


def _pipe(
    ranks: list[RankProc], out_dir: str, earlier_dir: str, deadline: float, outcome: Outcome, taken: dict[int, Taken]
) -> None:
    """Ask every rank with a dump pipe for a dump, then wait (until ``deadline``) for each new dump file."""
    waiting: dict[int, tuple[RankProc, str, tuple[int, int] | None]] = {}
    for rp in ranks:
        pipe = in_rank(rp, f"{rp.env[PIPE_VAR]}{rp.rank}.pipe")
        fd, why = open_pipe(pipe)
        if why:
            if rp.env.get("TORCH_NCCL_BLOCKING_WAIT", "").lower() in ("1", "true", "yes", "on"):
                why += "; TORCH_NCCL_BLOCKING_WAIT=1 runs no watchdog, so no heartbeat monitor makes or reads it"
            taken[rp.rank].why = why
            continue
        target = dump_file(rp)
        before = _sig(target)
        if before is not None:  # the new dump overwrites it: keep what the job had written (e.g. a timeout's)
            os.makedirs(earlier_dir, mode=0o700, exist_ok=True)
            kept = os.path.join(earlier_dir, f"rank_{rp.rank}")
            if _copy(target, kept):
                outcome.earlier.append(kept)
        why = write_pipe(fd, pipe)
        if why:
            taken[rp.rank].why = why
            continue
        waiting[rp.rank] = (rp, target, before)
    last: dict[int, tuple[int, int] | None] = {}
    while waiting and time.monotonic() < deadline:
        time.sleep(_STABLE)
        for r, (rp, target, before) in list(waiting.items()):
            now = _sig(target)
            if now is None or now == before or now != last.get(r):
                last[r] = now  # not written yet, or still growing
                continue
            out = os.path.join(out_dir, f"rank_{r}")
            if not _copy(target, out):
                continue
            fmt, err, entries = _check(out)
            if err:  # written in place: a half-written file reads as truncated; wait for the rest
                last[r] = None
                continue
            t = taken[r]
            t.how, t.path, t.fmt, t.entries, t.why = "NCCL's dump pipe", out, fmt, entries, ""
            del waiting[r]
    for r, (rp, target, _before) in waiting.items():
        wait = _pipe_period(rp.env)
        slow = f" (it reads its pipe every {wait:g} s: TORCH_NCCL_DUMP_ON_TIMEOUT=0)" if wait > 60 else ""
        taken[r].why = f"asked through {rp.env[PIPE_VAR]}{r}.pipe, but no new dump appeared in {target} in time{slow}"


def _pipe_period(env: dict[str, str]) -> float:
    """How often NCCL's heartbeat monitor reads the pipe: TORCH_NCCL_COORD_CHECK_MILSEC while it checks dump
    signals (TORCH_NCCL_DUMP_ON_TIMEOUT, default on), else once per TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC."""
    try:
        if env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "1").lower() in ("0", "false", "no", "off"):
            return float(env.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC") or 480)
        return float(env.get("TORCH_NCCL_COORD_CHECK_MILSEC") or 1000) / 1000
    except ValueError:
        return 1.0


# -- shared -----------------------------------------------------------------------------------------------------


def _copy(src: str, dst: str) -> bool:
    try:
        if os.path.getsize(src) > MAX_DUMP:
            return False
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(src, "rb") as f, os.fdopen(fd, "wb") as g:
            shutil.copyfileobj(f, g)
        return True
    except OSError:
        return False


def _keep(data: bytes, out: str) -> tuple[str, str, int]:
    """Write a dump received over HTTP and check it. (format, error, entries); the file is removed on error."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return _check(out)


def _check(path: str) -> tuple[str, str, int]:
    """Read a taken dump with the post-mortem's reader (a pickle resolves no global; nothing in it is run)."""
    try:
        d = flight.load(path)
    except flight.DumpError as e:
        try:
            os.unlink(path)
        except OSError:
            pass
        return "", str(e).replace(path + ": ", ""), 0
    return d.fmt, "", d.n_entries


def _entries(path: str) -> int:
    try:
        return flight.load(path).n_entries
    except flight.DumpError:
        return 0


def _no_trigger(rp: RankProc, names: set[str]) -> str:
    """Why a rank whose FR is on offers no trigger, and what would give one."""
    if "pt_nccl_watchdg" in names:
        return f"no dump trigger: start the job with {PIPE_VAR}=<folder>/fr_pipe_ (NCCL's pipe) or {DEBUG_SERVER}"
    return f"gloo has no dump trigger and no debug server runs: start the job's ranks with {DEBUG_SERVER}"


def take(job: Job, run_dir: str, timeout: float) -> Outcome:
    """Take the FR of every local rank of ``job`` into ``run_dir``/fr, within ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    out_dir = os.path.join(run_dir, schema.FR_DIR)
    os.makedirs(out_dir, mode=0o700, exist_ok=True)
    outcome = Outcome()
    taken = {rp.rank: Taken(rp.rank) for rp in job.ranks}
    names = {rp.rank: threads(rp.pid) for rp in job.ranks}
    live = []
    for rp in job.ranks:
        size = ring_size(rp.env)
        if size is not None and size <= 0:
            key = "TORCH_FR_BUFFER_SIZE" if "TORCH_FR_BUFFER_SIZE" in rp.env else "TORCH_NCCL_TRACE_BUFFER_SIZE"
            taken[rp.rank].why = f"its flight recorder is off ({key}={rp.env[key]}): start the job with {FR_ON}"
        else:
            live.append(rp)
    served = [rp for rp in live if "pt_workerserver" in names[rp.rank]]
    if served:
        _debug_server(job, served, out_dir, deadline, taken)
    piped = [rp for rp in live if not taken[rp.rank].how and rp.env.get(PIPE_VAR)]
    if piped:
        _pipe(piped, out_dir, os.path.join(run_dir, schema.FR_EARLIER_DIR), deadline, outcome, taken)
    for rp in live:
        t = taken[rp.rank]
        if not t.how and not t.why:
            t.why = _no_trigger(rp, names[rp.rank])
    outcome.taken = [taken[r] for r in sorted(taken)]
    outcome.note = summary(outcome)
    if not any(t.how for t in outcome.taken):
        try:
            os.rmdir(out_dir)  # nothing taken: no empty fr/ folder for analyze to look into
        except OSError:
            pass
    return outcome


def summary(outcome: Outcome) -> str:
    """The report's one line: where the FR came from, or why the report rests on stacks only."""
    got = [t for t in outcome.taken if t.how]
    parts = []
    by_how: dict[str, list[int]] = {}
    for t in got:
        fmt = "JSON: no stacks, the lines are py-spy's" if t.fmt == "json" else t.fmt
        by_how.setdefault(f"{t.how} ({fmt})", []).append(t.rank)
    for how, ranks in by_how.items():
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} through {how}")
    by_why: dict[str, list[int]] = {}
    for t in outcome.taken:
        if not t.how:
            by_why.setdefault(t.why, []).append(t.rank)
    misses = [f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {why}" for why, rs in by_why.items()]
    kept = f"; the dumps the job had written before are kept in {schema.FR_EARLIER_DIR}/" if outcome.earlier else ""
    if not got:
        return "stacks only, no flight recorder: " + "; ".join(misses) + kept
    line = "flight recorder taken from " + "; ".join(parts)
    return line + (f"; not from {'; '.join(misses)}" if misses else "") + kept
