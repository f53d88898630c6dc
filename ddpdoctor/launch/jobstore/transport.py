"""The job's c10d TCPStore: served by the node that can bind its address, joined by the others; every call
bounded, every key under the job's prefix; and the link's states."""

from __future__ import annotations

import errno
import gc
import os
import socket
import threading
import time
from datetime import timedelta
from enum import Enum
from typing import Any

from ddpdoctor.launch.jobstore.address import OWNER_KEY, ForeignStore, StoreAddr, owner_mismatch, owner_value

OP_TIMEOUT_S = 5.0  # every store call
CONNECT_S = 60.0  # a client waits this long for the judging node's store to appear
OWNER_WAIT_S = 5.0  # a client waits this long for the owner value (the server sets it right after it starts)
# what a store call raises: torch's DistError family (RuntimeError), sockets, a value that does not decode,
# and no torch at all
STORE_ERRORS = (RuntimeError, OSError, ValueError, ImportError)


def _listen(host: str, port: int) -> socket.socket | None:
    """A listening socket on ``host:port`` when ``host`` is one of this machine's addresses and the port is
    free: then this ddpdoctor serves the store. None otherwise (another host's address, or taken)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for family, stype, proto, _canon, sockaddr in infos:
        s = socket.socket(family, stype, proto)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(sockaddr)
            s.listen(512)
            s.set_inheritable(False)
            return s
        except OSError as e:
            s.close()
            if e.errno not in (errno.EADDRNOTAVAIL, errno.EADDRINUSE, errno.EAFNOSUPPORT):
                return None
    return None


def _import_dist() -> Any:
    """torch.distributed, with c10d's C++ log quiet: a client retrying its connection would print pages of
    traces on the user's terminal. The variable is only set for the import (c10 reads it once)."""
    old = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        import torch.distributed as dist
    finally:
        if old is None:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
        else:
            os.environ["TORCH_CPP_LOG_LEVEL"] = old
    return dist


# -- the link's states ------------------------------------------------------------------------------
class LinkState(str, Enum):
    """Where this node's link to the job store stands (a ``str``: monitor.jsonl and the tests read the word)."""

    CONNECTING = "connecting"
    LINKED = "linked"
    UNREACHABLE = "unreachable"
    FOREIGN = "foreign"  # the store at the address serves another job: never joined
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def may_become(self, other: LinkState) -> bool:
        """A move the link may make: staying put always; out of CONNECTING once (linked, or why not);
        out of LINKED only on a failure or the close after the run. The other states are final: a
        connection that comes in after the monitor gave up (finish) does not relink the node."""
        return other is self or other in _NEXT_STATES[self]


_NEXT_STATES: dict[LinkState, frozenset[LinkState]] = {
    LinkState.CONNECTING: frozenset({LinkState.LINKED, LinkState.UNREACHABLE, LinkState.FOREIGN}),
    LinkState.LINKED: frozenset({LinkState.UNREACHABLE, LinkState.CLOSED}),
    LinkState.UNREACHABLE: frozenset(),
    LinkState.FOREIGN: frozenset(),
    LinkState.CLOSED: frozenset(),
}


# -- transport ------------------------------------------------------------------------------------
class Transport:
    """The job's c10d TCPStore: served here when this host can bind its address, else joined as a client;
    every call bounded by OP_TIMEOUT_S, every key under the job's prefix. Holds the link's state."""

    def __init__(self, addr: StoreAddr, stop: threading.Event) -> None:
        self.addr, self._stop = addr, stop
        self.prefix = f"ddpdoctor/{addr.job}/"
        self.state = LinkState.CONNECTING
        self._store: Any = None
        self._server: Any = None
        self._sock: socket.socket | None = None

    def become(self, state: LinkState) -> bool:
        """Move to ``state`` when :meth:`LinkState.may_become` allows it (else stay)."""
        if not self.state.may_become(state):
            return False
        self.state = state
        return True

    def linked(self) -> bool:
        return self.state is LinkState.LINKED

    @property
    def where(self) -> str:
        return f"{self.addr.host}:{self.addr.port}"

    def connect(self, host: str) -> bool:
        """Serve the store (True: this node judges) or join it; the store must be this job's
        (:class:`ForeignStore`). ``host``: this node's, in the owner value. Does not change the state: the
        link does, once its role is set."""
        dist = _import_dist()
        self._sock = _listen(self.addr.host, self.addr.port)
        timeout = timedelta(seconds=OP_TIMEOUT_S)
        serving = self._sock is not None
        if self._sock is not None:
            fd = self._sock.detach()  # TCPStore owns the listening socket from here on (and closes it)
            self._sock = None
            self._server = dist.TCPStore(
                self.addr.host,
                self.addr.port,
                is_master=True,
                wait_for_workers=False,
                timeout=timeout,
                master_listen_fd=fd,
            )
            # the judge decodes a thousand ranks' values a second: each collection of the oldest generation
            # would walk every object torch's import made (a few hundred thousand) for nothing (they live
            # as long as this process). Freeze them out of the collector's walks (the monitor's process is
            # ddpdoctor's own: no user code runs in it)
            gc.freeze()
        deadline = time.time() + CONNECT_S
        while True:
            try:
                self._store = dist.TCPStore(
                    self.addr.host,
                    self.addr.port,
                    is_master=False,
                    timeout=timedelta(seconds=min(10.0, max(1.0, deadline - time.time()))),
                )
                break
            except Exception:
                if time.time() >= deadline or self._stop.is_set():
                    raise
                time.sleep(0.5)
        self._store.set_timeout(timeout)
        if serving:
            self._store.set(OWNER_KEY, owner_value(self.addr.job, host))
        else:
            self._check_owner()
        return serving

    def _check_owner(self) -> None:
        """A client: the store must name this job (:func:`owner_mismatch`), else :class:`ForeignStore`."""
        deadline = time.time() + OWNER_WAIT_S
        while not self._store.check([OWNER_KEY]):
            if time.time() >= deadline or self._stop.is_set():
                raise ForeignStore(owner_mismatch(None, self.addr.job) or "")
            time.sleep(0.1)
        why = owner_mismatch(bytes(self._store.get(OWNER_KEY)), self.addr.job)
        if why:
            raise ForeignStore(why)

    def open(self) -> bool:
        return self._store is not None

    def set(self, key: str, value: bytes) -> None:
        self._store.set(self.prefix + key, value)

    def check(self, key: str) -> bool:
        return bool(self._store.check([self.prefix + key]))

    def check_all(self, keys: list[str]) -> bool:
        """Every one of ``keys`` (full keys) is there: one round trip."""
        return bool(self._store.check(keys))

    def get(self, key: str) -> bytes:
        return bytes(self._store.get(self.prefix + key))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [bytes(raw) for raw in self._store.multi_get(keys)]

    def drop(self) -> None:
        """Never use this store again (another job's)."""
        self._store = None

    def close(self) -> None:
        self.become(LinkState.CLOSED)
        self._store = None
        self._server = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
