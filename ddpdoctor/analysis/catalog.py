"""The finding catalog: every id ddpdoctor can emit, with its family, severity, verdict, exit code and page.

Like a linter's rule list (``ddpdoctor findings`` prints it; ``--json`` for tools). The verdict and exit
code of a report come from here (``registry.diagnose``), the docs test checks one page per id, the
README's list of ids is checked against it, and a test scans the code for id literals that are not in
it. Pure, stdlib only.

An id's family is its prefix (``crash`` of ``crash.exception``): what ``findings --family`` and
``--select``/``--ignore`` name. Its group is the key every registry shares (commands, rank probes, detectors,
HTML sections): ``hang`` (run by every command: how the run ended and why it stopped), ``check``,
``memleak``, ``profile``, plus ``probe`` (ddpdoctor's own health inside the ranks) and ``doctor`` (the health
check, its own report).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ddpdoctor.analysis.findings import Severity, Verdict
from ddpdoctor.errors import ExitCode

GROUPS = ("hang", "check", "memleak", "profile", "probe", "doctor")
# The pages ship in the package (``ddpdoctor findings ID``). A web address is given only where the
# installed distribution's metadata names one (``[project.urls]`` "Findings" or "Documentation"): an address
# made up here would point readers at a page nobody published.
_URL_LABELS = ("findings", "documentation")


def docs_base() -> str | None:
    """The web folder of the finding pages from the installed package's ``Project-URL`` metadata, or None."""
    return _docs_base()


@functools.lru_cache(maxsize=1)
def _docs_base() -> str | None:
    from importlib import metadata

    try:
        urls = metadata.metadata("ddpdoctor").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    named = {}
    for item in urls:
        label, _, url = str(item).partition(",")
        named[label.strip().lower()] = url.strip().rstrip("/")
    for label in _URL_LABELS:
        if named.get(label):
            return named[label] if label == "findings" else f"{named[label]}/findings"
    return None


@dataclass(frozen=True)
class Entry:
    """One finding id. ``severities``: every severity the code can give it (the first is the usual one).
    ``verdict`` and ``exit_code``: what the report says when the finding is at severity error (a warning
    or a note leaves the verdict OK and exits 0 unless ``--fail-on`` asks)."""

    id: str
    group: str  # the registry key (GROUPS): which command's detectors give it
    severities: tuple[Severity, ...]
    title: str
    verdict: Verdict = "findings"
    exit_code: int = ExitCode.FINDINGS

    @property
    def family(self) -> str:
        """The id's prefix: ``crash`` for ``crash.exception``."""
        return self.id.split(".", 1)[0]

    @property
    def severity(self) -> Severity:
        """The usual severity."""
        return self.severities[0]

    @property
    def page(self) -> str:
        """The docs page, relative to the repository root (shipped in the package too: ``page_text``)."""
        return f"docs/findings/{self.id}.md"

    @property
    def url(self) -> str | None:
        """The page's web address where the package's metadata names one (see ``docs_base``), else None."""
        base = docs_base()
        return f"{base}/{self.id}.md" if base else None


def _e(
    id: str, family: str, severity: str, title: str, verdict: Verdict = "findings", exit_code: int = ExitCode.FINDINGS
) -> Entry:
    return Entry(id, family, tuple(severity.split("|")), title, verdict, exit_code)  # type: ignore[arg-type]


_ENTRIES = (
    # hang: every command runs these
    _e(
        "run.failed-before-init",
        "hang",
        "error",
        "the script ended before init_process_group",
        "error",
        ExitCode.NOT_RUN,
    ),
    _e("run.no-distributed", "hang", "error", "the script never called init_process_group", "error", ExitCode.USAGE),
    _e("run.not-started", "hang", "error", "torchrun started no rank", "error", ExitCode.NOT_RUN),
    _e(
        "crash.exception",
        "hang",
        "error",
        "a rank raised; the first one is the root cause, the others victims",
        "crash",
    ),
    _e("crash.abnormal-exit", "hang", "error", "a rank ended abnormally (exit code, fatal signal, killed)", "crash"),
    _e(
        "hang.rank-conditional-collective",
        "hang",
        "error",
        "a collective called on some ranks only",
        "hang",
        ExitCode.HANG,
    ),
    _e(
        "hang.divergent-collective",
        "hang",
        "error",
        "ranks issued different collectives at one position",
        "hang",
        ExitCode.HANG,
    ),
    _e(
        "hang.early-exit",
        "hang",
        "error",
        "a rank left the training loop while the others go on",
        "hang",
        ExitCode.HANG,
    ),
    _e("hang.uneven-batches", "hang", "error", "ranks ran different numbers of DDP steps", "hang", ExitCode.HANG),
    _e(
        "hang.shape-mismatch",
        "hang",
        "error",
        "the same collective with tensors of different shape",
        "hang",
        ExitCode.HANG,
    ),
    _e("hang.p2p-deadlock", "hang", "error", "every rank waits to receive", "hang", ExitCode.HANG),
    _e(
        "hang.timeout", "hang", "error|warning", "an uncertain wait lasted longer than --timeout", "hang", ExitCode.HANG
    ),
    _e(
        "hang.transport-stall",
        "hang",
        "error|warning",
        "every rank inside the same collective, nothing moves",
        "hang",
        ExitCode.HANG,
    ),
    _e("collective.shape-mismatch", "hang", "error", "a collective completed with mismatched shapes"),
    _e("teardown.gloo-abort", "hang", "warning", "torch 2.13 + gloo aborted a finished rank at exit"),
    _e("multinode.partial-view", "hang", "warning", "this node's records cover only part of the job"),
    _e(
        "multinode.lost-node", "hang", "error", "a node of the job disappeared: its host, ranks and last state", "crash"
    ),
    _e("attach.running", "hang", "note", "attach: the job was running, what every rank was doing"),
    # post-mortem of torch's own records (analyze of flight-recorder dumps, error files, logs)
    _e(
        "postmortem.no-dump", "hang", "error|warning", "a rank left no flight-recorder dump: the first suspect", "crash"
    ),
    _e("postmortem.mixed-dumps", "hang", "warning", "the dumps come from different jobs, attempts or versions"),
    _e("rundir.records-missing", "hang", "error", "a rank's records are deleted or cut in the run directory"),
    # check
    _e(
        "data.missing-set-epoch",
        "check",
        "error",
        "DistributedSampler.set_epoch not called: every epoch the same order",
    ),
    _e("data.sampler-seed-mismatch", "check", "error", "the ranks' DistributedSamplers have different seeds"),
    _e("data.shard-overlap", "check", "error", "the ranks train on overlapping data"),
    _e("data.shard-gaps", "check", "error", "the ranks together fetched only part of the data set"),
    _e("data.padding-duplicates", "check", "note", "DistributedSampler pads with repeated samples (drop_last=False)"),
    _e("data.uneven-batches", "check", "warning", "the ranks' training DataLoaders have different lengths"),
    _e("drift.init-mismatch", "check", "error", "parameters differ across ranks right after DDP(...)"),
    _e("drift.parameters", "check", "error", "parameters drifted apart across ranks during training"),
    _e("drift.buffers", "check", "error", "buffers (BatchNorm statistics, counters) differ across ranks"),
    _e("seed.identical-streams", "check", "note", "every rank starts with the same RNG state"),
    _e("checkpoint.multiple-writers", "check", "error", "several ranks write the same checkpoint file"),
    _e("perf.grad-accum-no-sync", "check", "warning", "gradient accumulation without no_sync()"),
    # memleak
    _e("memleak.autograd-graph", "memleak", "error", "autograd graphs kept alive from step to step"),
    _e("memleak.tensors", "memleak", "error", "live tensors of one kind keep increasing"),
    _e("memleak.python-objects", "memleak", "error", "Python objects tracked by the GC keep increasing"),
    _e("memleak.dataloader-workers", "memleak", "error", "DataLoader worker processes' memory grows"),
    _e("memleak.cuda", "memleak", "error", "CUDA allocated memory grows step after step"),
    _e(
        "memleak.cuda-reserved",
        "memleak",
        "warning",
        "the CUDA caching allocator's reserved memory grows while allocated stays flat (fragmentation)",
    ),
    _e(
        "memleak.cuda-outside-allocator",
        "memleak",
        "error",
        "the process's GPU memory (NVML) grows outside PyTorch's caching allocator",
    ),
    _e("memleak.rss", "memleak", "error", "process RSS grows with no more specific cause"),
    # profile
    _e("profile.straggler", "profile", "warning", "a rank is slower than the others in one phase"),
    _e("profile.dataloader-bound", "profile", "warning", "steps wait on the DataLoader"),
    _e("profile.low-gpu-util", "profile", "warning", "median GPU utilisation below 90 %"),
    _e("profile.summary", "profile", "note", "each rank's median step split into phases"),
    # ddpdoctor's own probes
    _e("probe.internal-error", "probe", "note", "a ddpdoctor probe failed inside a rank: the data it misses"),
    # doctor (the health check)
    _e("doctor.no-torch", "doctor", "error", "torch cannot be imported"),
    _e("doctor.socket-ifname", "doctor", "error|warning", "GLOO/NCCL_SOCKET_IFNAME names no usable interface"),
    _e("doctor.master-addr", "doctor", "error", "MASTER_ADDR does not resolve or is not this host's"),
    _e("doctor.port-in-use", "doctor", "error", "the rendezvous port is taken"),
    _e("doctor.master-unreachable", "doctor", "error", "the rendezvous host cannot be reached"),
    _e("doctor.shm-small", "doctor", "warning", "/dev/shm is too small for DataLoader workers and NCCL"),
    _e("doctor.open-files", "doctor", "warning", "the open-files limit is low for DDP"),
    _e("doctor.gpu-ecc", "doctor", "warning", "a GPU reports uncorrected ECC errors"),
    _e("doctor.launch-failed", "doctor", "error", "the health worker could not be launched"),
    _e("doctor.init-failed", "doctor", "error", "init_process_group failed on some ranks"),
    _e("doctor.world-size-mismatch", "doctor", "error", "fewer or more ranks joined than expected"),
    _e("doctor.rank-missing", "doctor", "error", "a rank left no result"),
    _e("doctor.rank-error", "doctor", "error", "a rank of the health check raised"),
    _e("doctor.hang", "doctor", "error", "the health check did not finish in time"),
    _e("doctor.collective-wrong", "doctor", "error", "a collective gave a wrong result"),
    _e("doctor.collective-failed", "doctor", "error", "a collective raised"),
    _e("doctor.low-busbw", "doctor", "error", "all_reduce bus bandwidth below --min-busbw"),
    _e("doctor.clock-skew", "doctor", "warning", "the nodes' clocks differ"),
    _e("doctor.fr-old-name", "doctor", "warning|note", "a flight-recorder variable under its old name"),
    _e("doctor.fr-buffer-off", "doctor", "warning", "flight-recorder dumps asked for with a buffer of 0"),
    _e("doctor.fr-dump-tmp", "doctor", "warning|error", "flight-recorder dumps to node-local /tmp or a missing folder"),
    _e("doctor.fr-heartbeat-timeout", "doctor", "warning", "heartbeat vs watchdog timeouts that defeat the dump"),
    _e("doctor.debug-detail", "doctor", "warning", "TORCH_DISTRIBUTED_DEBUG=DETAIL left on"),
    _e("doctor.probe-failed", "doctor", "error", "a built-in probe did not give its expected finding"),
)

CATALOG: dict[str, Entry] = {e.id: e for e in _ENTRIES}
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(e.family for e in _ENTRIES))  # the id prefixes, catalog order

# which verdict wins when a report has error findings of several verdicts
VERDICT_RANK: dict[str, int] = {"error": 0, "hang": 1, "crash": 2, "findings": 3, "ok": 4}


def entry(fid: str) -> Entry:
    """The catalog entry of ``fid``; an id the catalog lacks (a bug, caught by the tests) reads as a plain
    error of its prefix's family so that a report is still given."""
    e = CATALOG.get(fid)
    if e is not None:
        return e
    return Entry(fid, fid.split(".", 1)[0], ("error",), "(not in the catalog)")


_GROUP_NOTE = {
    "hang": "every command",
    "check": "`check`",
    "memleak": "`memleak`",
    "profile": "`profile`",
    "probe": "every command",
    "doctor": "`doctor`",
}


def readme_table() -> str:
    """The README's list of findings (between its ``findings:begin``/``findings:end`` markers), made from
    the catalog; ``tests/unit/analysis/test_catalog.py`` keeps the README equal to it."""
    rows = ["| run by | findings |", "|---|---|"]
    for group in GROUPS:
        ids = [f"[`{e.id}`]({e.page})" for e in _ENTRIES if e.group == group]
        rows.append(f"| {group} ({_GROUP_NOTE[group]}) | {', '.join(ids)} |")
    return "\n".join(rows)


def _page_dirs() -> list[str]:
    """Where the pages are: the package's ``findings_pages`` (an installed wheel), else the checkout's
    ``docs/findings`` beside the package (an editable install, which does not map a folder without code)."""
    import importlib.util
    import os

    dirs = []
    try:
        spec = importlib.util.find_spec("ddpdoctor.findings_pages")
        dirs += list(spec.submodule_search_locations or ()) if spec else []
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))  # ddpdoctor/analysis
    dirs.append(os.path.join(os.path.dirname(os.path.dirname(here)), "docs", "findings"))
    return [d for d in dirs if os.path.isdir(d)]


def page_text(fid: str) -> str | None:
    """The page of ``fid`` as Markdown, or None when this install has none."""
    import os

    if fid not in CATALOG:
        return None
    for d in _page_dirs():
        path = os.path.join(d, f"{fid}.md")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    return None


def selected(fid: str, select: tuple[str, ...], ignore: tuple[str, ...]) -> bool:
    """ruff's rule for ``--select``/``--ignore``: each names an id or a family (``crash``, ``crash.exception``);
    an id is kept when some select names it (no select: all) and no ignore does, the more specific name
    winning when both do (``--select crash --ignore crash.abnormal-exit``; ``--ignore hang --select
    hang.timeout``) and the ignore when both are as specific."""

    def best(names: tuple[str, ...]) -> float:
        # 2: the id itself, 1: its family, 0: neither
        fam = fid.split(".", 1)[0]
        return max((2 if n == fid else 1 if n == fam else 0 for n in names), default=0)

    s = best(select) if select else 0.5  # no --select: everything, less specific than any name
    return s > 0 and s > best(ignore)  # equally specific: the ignore wins (ruff's rule)


def check_names(names: tuple[str, ...], option: str) -> None:
    """Every name of ``--select``/``--ignore`` is an id or a family of the catalog; else one line, exit 2."""
    import difflib

    from ddpdoctor.errors import DdpdoctorError

    known = [*CATALOG, *FAMILIES]
    for n in names:
        if n not in known:
            close = difflib.get_close_matches(n, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (`ddpdoctor findings` lists them)"
            raise DdpdoctorError(f"{option} {n}: no such finding id or family{hint}")
