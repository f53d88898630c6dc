"""The live view while a run goes on: one row per rank (step, steps/s, collectives, state, current line),
or, past ``MAX_RANK_ROWS`` ranks, one row per group of ranks in the same state plus the slowest ranks:
a bounded table at any world size.

:func:`build_view` is pure (a RunRecord, ``now``, a Config, the step history -> rows; in
:mod:`ddpdoctor.render.live.rows`, re-exported here). Two presenters
show it: on a terminal :class:`TtyView` redraws the table in place on stderr with ``rich`` (imported
only when it starts) and prints the workers' lines above it, intact; elsewhere (CI logs, pipes) the
monitor keeps printing its plain status lines (``analysis.live.status_line``), so nothing changes there.
``DDPDOCTOR_LIVE=0`` turns the table off on a terminal too.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any

from ddpdoctor.render.live.rows import MAX_GROUPS, MAX_RANK_ROWS, N_SLOWEST, WINDOW_S, Rates, Row, View, build_view

__all__ = [
    "ENV",
    "MAX_GROUPS",
    "MAX_RANK_ROWS",
    "N_SLOWEST",
    "WINDOW_S",
    "Rates",
    "Row",
    "TtyView",
    "View",
    "build_view",
    "render",
    "start_view",
    "wanted",
]

ENV = "DDPDOCTOR_LIVE"


def wanted(stream: Any) -> bool:
    """The table on this stream: a terminal, not TERM=dumb, and not DDPDOCTOR_LIVE=0."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


# -- the terminal presenter ---------------------------------------------------------------------------

_STYLE = {
    "running": "green",
    "waiting": "yellow",
    "stale": "magenta",
    "crashed": "bold red",
    "ended": "dim",
    "not-started": "dim",
}


def _one_line(data: bytes) -> str:
    """A worker's line as the terminal would leave it: a carriage return (progress bars) keeps the last part."""
    text = data.decode("utf-8", errors="replace").rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return text


class _Routed:
    """A byte stream for the monitor's forwarding threads: lines go above the table while it is shown."""

    def __init__(self, view: TtyView, real: Any) -> None:
        self.view, self.real = view, real

    def write(self, data: bytes) -> None:
        if not self.view.line(data):
            self.real.write(data)

    def flush(self) -> None:
        if not self.view.active:
            self.real.flush()


class TtyView:
    """Redraws the table in place on a terminal (rich's Live; its own thread, ~10 redraws a second at most).
    The workers' lines and ddpdoctor's messages are queued and printed above the table, whole."""

    PERIOD = 0.1
    MAX_QUEUED = 20000

    def __init__(self, stream: Any) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=stream, highlight=False, emoji=False, markup=False)
        self.live = Live(
            console=self.console,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
            auto_refresh=False,
            vertical_overflow="ellipsis",
        )
        self.fd = stream.fileno() if hasattr(stream, "fileno") else None
        self.active = False
        self._lock = threading.Lock()
        self._lines: deque[str] = deque()
        self._view: View | None = None
        self._drawn: View | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> TtyView:
        self.live.start()
        self.active = True
        self._thread = threading.Thread(target=self._loop, name="ddpdoctor-live", daemon=True)
        self._thread.start()
        return self

    def route(self, real: Any) -> Any:
        """The stream the forwarding thread should write to: through the view when ``real`` is this
        terminal (the same device), else ``real`` itself (a redirected stdout stays untouched)."""
        if real is None:
            return None
        try:
            same = (
                self.fd is not None
                and os.isatty(real.fileno())
                and os.path.samestat(os.fstat(real.fileno()), os.fstat(self.fd))
            )
        except (OSError, ValueError, AttributeError):
            same = False
        return _Routed(self, real) if same else real

    def line(self, data: bytes) -> bool:
        """Queue a worker's line; False when the view is no longer shown (the caller writes it itself)."""
        with self._lock:
            if not self.active:
                return False
            self._lines.append(_one_line(data))
            n = len(self._lines)
        deadline = time.monotonic() + 5.0
        while n > self.MAX_QUEUED and self.active and time.monotonic() < deadline:
            time.sleep(0.01)  # the terminal is slower than the workers: hold the pipe as a terminal would
            n = len(self._lines)
        return True

    def say(self, msg: str) -> None:
        """Print a message of ddpdoctor's above the table."""
        if not self.line(f"ddpdoctor: {msg}".encode()):
            self.console.print(f"ddpdoctor: {msg}", soft_wrap=True)

    def update(self, view: View) -> None:
        """The view to draw at the next redraw."""
        self._view = view

    def _loop(self) -> None:
        last = 0.0
        while not self._stop.wait(self.PERIOD):
            try:
                self._draw(force=time.monotonic() - last > 1.0)
                last = time.monotonic()
            except Exception:  # the view must never take the run down
                pass

    def _draw(self, force: bool = False) -> None:
        from rich.text import Text

        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
        if lines:
            self.console.print(Text("\n").join(Text.from_ansi(x) for x in lines), soft_wrap=True)
        view = self._view
        if view is not None and (view is not self._drawn or force or lines):
            self.live.update(render(view), refresh=True)
            self._drawn = view

    def stop(self) -> None:
        """Draw what is left, leave the last table on the screen, restore the terminal."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._lock:
            self.active = False
        try:
            self._draw(force=True)
        finally:
            self.live.stop()


def render(view: View) -> Any:
    """The rich Table of a View."""
    from rich.table import Table

    counts = ", ".join(f"{n} {k}" for k, n in view.counts)
    t = Table(
        title=f"ddpdoctor {view.title}: {counts}",
        title_justify="left",
        expand=False,
        box=None,
        header_style="bold",
        pad_edge=False,
    )
    t.add_column("rank", no_wrap=True, overflow="ellipsis", max_width=34)
    t.add_column("step", justify="right", no_wrap=True)
    t.add_column("steps/s", justify="right", no_wrap=True)
    t.add_column("colls", justify="right", no_wrap=True)
    t.add_column("state", no_wrap=True, overflow="ellipsis", max_width=44)
    t.add_column("line", no_wrap=True, overflow="ellipsis")
    for r in view.rows:
        label = r.label + (f" ({r.note})" if r.note else "")
        t.add_row(label, r.step, r.rate, r.ncoll, r.state, r.where, style=_STYLE.get(r.kind))
    if view.hidden:
        t.add_row(f"... {view.hidden} more groups", "", "", "", "", "", style="dim")
    return t


def start_view(stream: Any) -> TtyView | None:
    """A started TtyView on ``stream`` when it is a terminal (and the table is not turned off), else None."""
    if not wanted(stream):
        return None
    try:
        return TtyView(stream).start()
    except Exception:  # rich missing or the terminal refuses: the plain lines do
        return None
