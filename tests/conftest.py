"""Shared fixtures for both tiers.

tests/unit/ mirrors the package (tests/unit/<package>/test_<module>.py): pure or in-process, no torchrun;
``pytest tests/unit`` is the quick loop. tests/e2e/ runs real jobs (torchrun ranks on gloo, several
ddpdoctor processes on loopback, SLURM in network namespaces). The support modules (helpers.py,
builder.py, fakeprobe.py) and the data folders (scripts/, corpus/, golden/, frameworks/, frjobs/) stay in
tests/ itself, which this file puts on ``sys.path`` so that a test anywhere below imports them by name.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import helpers  # noqa: E402  (these need the path above)
import schedule  # noqa: E402
from builder import RunBuilder  # noqa: E402
from helpers import Result, ddpdoctor  # noqa: E402


@pytest.fixture
def free_port() -> Callable[..., int]:
    """``free_port()`` (or ``free_port(host)``): a TCP port free a moment ago, as many as a test needs."""
    return helpers.free_port


@pytest.fixture
def run_builder(tmp_path: Path) -> Callable[..., RunBuilder]:
    """``run_builder(name="run", **manifest)``: a hand-built run directory under the test's tmp_path."""

    def make(name: str = "run", **manifest: Any) -> RunBuilder:
        return RunBuilder(tmp_path / name, **manifest)

    return make


@pytest.fixture
def fake_probe(tmp_path: Path) -> Any:
    """Rank 0's real probe in a run directory under tmp_path, never started (tests/fakeprobe.py)."""
    from fakeprobe import make_probe

    return make_probe(tmp_path)


@pytest.fixture
def run_job(tmp_path: Path) -> Callable[..., Result]:
    """``run_job(args, **kw)``: one ddpdoctor run to its end (bounded), its report read back, and proof
    that no process it started is left (helpers.ddpdoctor)."""

    def run(args: list[str], **kw: Any) -> Result:
        return ddpdoctor(args, kw.pop("tmp", tmp_path), **kw)

    return run


_JOB_DEFAULTS: dict[str, Any] = {
    name: p.default for name, p in inspect.signature(ddpdoctor).parameters.items() if p.default is not p.empty
}


class JobCache:
    """One real job per scenario, shared by every test that asks for the same arguments, in whichever xdist
    worker it runs: the first asker runs it (helpers.ddpdoctor, orphans checked) under a file lock and
    writes its Result beside the lock; later askers, in this worker or another, read that Result back.
    Every wait is bounded by the job's own timeout plus a minute."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def run(self, args: list[str], **kw: Any) -> Result:
        import fcntl
        import hashlib
        import json
        import time

        # the key leaves out arguments given at their default, so that `run(args)` and `run(args,
        # timeout=120)` in two modules share one job instead of running it twice
        key = json.dumps([list(args), sorted((k, repr(v)) for k, v in kw.items() if _JOB_DEFAULTS.get(k, ...) != v)])
        name = hashlib.sha1(key.encode()).hexdigest()[:16]
        done = self.root / f"{name}.json"
        bound = time.monotonic() + float(kw.get("timeout", 120)) + 60
        with open(self.root / f"{name}.lock", "w") as lock:
            while True:  # flock has no timeout of its own: poll it within the bound
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > bound:
                        raise AssertionError(f"the shared job {args} was not done within its bound") from None
                    time.sleep(0.2)
            try:
                if not done.exists():
                    tmp = self.root / f"job-{name}"
                    tmp.mkdir()
                    try:
                        got = ddpdoctor(args, kw.pop("tmp", tmp), **kw)
                        rec = {"code": got.code, "out": got.out, "err": got.err, "run_dir": str(got.run_dir)}
                        rec["report"] = got.report
                    except AssertionError as e:  # a job that failed fails every test that shares it
                        rec = {"error": str(e)}
                    done.write_text(json.dumps(rec))
                rec = json.loads(done.read_text())
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        if "error" in rec:
            raise AssertionError(rec["error"])
        return Result(rec["code"], rec["out"], rec["err"], Path(rec["run_dir"]), rec["report"])


@pytest.fixture(scope="session")
def shared_job(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> JobCache:
    """The session's JobCache: ``shared_job.run(args, cwd=..., timeout=...)`` runs a job once per session,
    across the xdist workers too (their base folders share a parent)."""
    base = tmp_path_factory.getbasetemp()
    return JobCache((base.parent if worker_id != "master" else base) / "shared-jobs")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``frameworks`` every test that helpers.needs() skips without the `frameworks` extra; then order
    the tests dearest first for the xdist workers (tests/schedule.py)."""
    for item in items:
        if any(helpers.FRAMEWORKS_EXTRA in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.frameworks)
    items[:] = schedule.dearest_first(items, Path(__file__).resolve().parent)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-hog",
        type=int,
        default=0,
        metavar="N",
        help="run N busy-loop processes beside the tests (N = cores: the loaded runs of the e2e tier)",
    )


_HOGS: list[Any] = []


def pytest_configure(config: pytest.Config) -> None:
    """``--cpu-hog N``: N processes that keep a core busy each, for the whole session (started once, in the
    main process, not in each xdist worker). No test may depend on a quiet host: the e2e tier must pass so."""
    from helpers import cpu_hog

    if hasattr(config, "workerinput"):
        return
    _compile_package()
    for _ in range(config.getoption("--cpu-hog")):
        _HOGS.append(cpu_hog())


def _compile_package() -> None:
    """Byte-compile the package once for the session. Every job the suite runs starts ddpdoctor in several
    processes (the command, each rank's bootstrap, the analysis), and where PYTHONDONTWRITEBYTECODE is set
    (this host, CI) none of them writes its .pyc, so each one compiled the same sources again: about 0.1 s
    of CPU per command, a few hundred times a session. Python still reads .pyc files under that setting;
    py_compile writes them whatever it says. Best effort: a read-only checkout just compiles as before."""
    import compileall

    import ddpdoctor

    try:
        compileall.compile_dir(str(Path(ddpdoctor.__file__).parent), quiet=2, workers=1)
    except OSError:
        pass


def pytest_unconfigure(config: pytest.Config) -> None:
    for h in _HOGS:  # by pid: only the processes started above
        h.kill()
        h.wait(timeout=10)
    _HOGS.clear()
