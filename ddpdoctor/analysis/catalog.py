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
from ddpdoctor.analysis.ids import (
    ATTACH_RUNNING,
    CHECKPOINT_MULTIPLE_WRITERS,
    COLLECTIVE_SHAPE_MISMATCH,
    CRASH_ABNORMAL_EXIT,
    CRASH_EXCEPTION,
    DATA_MISSING_SET_EPOCH,
    DATA_PADDING_DUPLICATES,
    DATA_SAMPLER_SEED_MISMATCH,
    DATA_SHARD_GAPS,
    DATA_SHARD_OVERLAP,
    DATA_UNEVEN_BATCHES,
    DOCTOR_CLOCK_SKEW,
    DOCTOR_COLLECTIVE_FAILED,
    DOCTOR_COLLECTIVE_WRONG,
    DOCTOR_DEBUG_DETAIL,
    DOCTOR_FR_BUFFER_OFF,
    DOCTOR_FR_DUMP_TMP,
    DOCTOR_FR_HEARTBEAT_TIMEOUT,
    DOCTOR_FR_OLD_NAME,
    DOCTOR_GPU_ECC,
    DOCTOR_HANG,
    DOCTOR_INIT_FAILED,
    DOCTOR_LAUNCH_FAILED,
    DOCTOR_LOW_BUSBW,
    DOCTOR_MASTER_ADDR,
    DOCTOR_MASTER_UNREACHABLE,
    DOCTOR_NO_TORCH,
    DOCTOR_OPEN_FILES,
    DOCTOR_PORT_IN_USE,
    DOCTOR_PROBE_FAILED,
    DOCTOR_RANK_ERROR,
    DOCTOR_RANK_MISSING,
    DOCTOR_SHM_SMALL,
    DOCTOR_SOCKET_IFNAME,
    DOCTOR_WORLD_SIZE_MISMATCH,
    DRIFT_BUFFERS,
    DRIFT_INIT_MISMATCH,
    DRIFT_PARAMETERS,
    HANG_DIVERGENT_COLLECTIVE,
    HANG_EARLY_EXIT,
    HANG_P2P_DEADLOCK,
    HANG_RANK_CONDITIONAL_COLLECTIVE,
    HANG_SHAPE_MISMATCH,
    HANG_TIMEOUT,
    HANG_TRANSPORT_STALL,
    HANG_UNEVEN_BATCHES,
    LAUNCH_RANK_NOT_ENTERED,
    MEMLEAK_AUTOGRAD_GRAPH,
    MEMLEAK_CUDA,
    MEMLEAK_CUDA_OUTSIDE_ALLOCATOR,
    MEMLEAK_CUDA_RESERVED,
    MEMLEAK_DATALOADER_WORKERS,
    MEMLEAK_PYTHON_OBJECTS,
    MEMLEAK_RSS,
    MEMLEAK_TENSORS,
    MULTINODE_LOST_NODE,
    MULTINODE_PARTIAL_VIEW,
    PERF_GRAD_ACCUM_NO_SYNC,
    POSTMORTEM_MIXED_DUMPS,
    POSTMORTEM_NO_DUMP,
    PROBE_INTERNAL_ERROR,
    PROFILE_DATALOADER_BOUND,
    PROFILE_EXPOSED_COMM,
    PROFILE_LOW_GPU_UTIL,
    PROFILE_STRAGGLER,
    PROFILE_SUMMARY,
    RUN_FAILED_BEFORE_INIT,
    RUN_NO_DISTRIBUTED,
    RUN_NOT_STARTED,
    RUN_RESTARTED,
    RUNDIR_RECORDS_MISSING,
    SEED_IDENTICAL_STREAMS,
    TEARDOWN_GLOO_ABORT,
)
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
    or a note leaves the verdict OK and exits 0 unless ``--fail-on`` asks). ``waited``: the verdict and exit
    code instead where the finding's evidence names ranks that wait for its culprits (``"waiting"``): a rank
    that left no flight-recorder dump is a crash on its own, a hang where the others wait for it."""

    id: str
    group: str  # the registry key (GROUPS): which command's detectors give it
    severities: tuple[Severity, ...]
    title: str
    verdict: Verdict = "findings"
    exit_code: int = ExitCode.FINDINGS
    waited: tuple[Verdict, int] | None = None

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
    id: str,
    family: str,
    severity: str,
    title: str,
    verdict: Verdict = "findings",
    exit_code: int = ExitCode.FINDINGS,
    waited: tuple[Verdict, int] | None = None,
) -> Entry:
    return Entry(id, family, tuple(severity.split("|")), title, verdict, exit_code, waited)  # type: ignore[arg-type]


_ENTRIES = (
    # hang: every command runs these
    _e(
        RUN_FAILED_BEFORE_INIT,
        "hang",
        "error",
        "the script ended before init_process_group",
        "error",
        ExitCode.NOT_RUN,
    ),
    _e(RUN_NO_DISTRIBUTED, "hang", "error", "the script never called init_process_group", "error", ExitCode.USAGE),
    _e(RUN_NOT_STARTED, "hang", "error", "torchrun started no rank", "error", ExitCode.NOT_RUN),
    _e(
        LAUNCH_RANK_NOT_ENTERED,
        "hang",
        "error",
        "your launch command ran ranks the probes could not enter",
        "error",
        ExitCode.NOT_RUN,
    ),
    _e(
        RUN_RESTARTED,
        "hang",
        "warning|note",
        "torchrun restarted the worker group (--max-restarts): what ended each attempt",
    ),
    _e(
        CRASH_EXCEPTION,
        "hang",
        "error",
        "a rank raised; the first one is the root cause, the others victims",
        "crash",
    ),
    _e(CRASH_ABNORMAL_EXIT, "hang", "error", "a rank ended abnormally (exit code, fatal signal, killed)", "crash"),
    _e(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "hang",
        "error",
        "a collective called on some ranks only",
        "hang",
        ExitCode.HANG,
    ),
    _e(
        HANG_DIVERGENT_COLLECTIVE,
        "hang",
        "error",
        "ranks issued different collectives at one position",
        "hang",
        ExitCode.HANG,
    ),
    _e(
        HANG_EARLY_EXIT,
        "hang",
        "error",
        "a rank left the training loop while the others go on",
        "hang",
        ExitCode.HANG,
    ),
    _e(HANG_UNEVEN_BATCHES, "hang", "error", "ranks ran different numbers of DDP steps", "hang", ExitCode.HANG),
    _e(
        HANG_SHAPE_MISMATCH,
        "hang",
        "error",
        "the same collective with tensors of different shape",
        "hang",
        ExitCode.HANG,
    ),
    _e(HANG_P2P_DEADLOCK, "hang", "error", "every rank waits to receive", "hang", ExitCode.HANG),
    _e(HANG_TIMEOUT, "hang", "error|warning", "an uncertain wait lasted longer than --timeout", "hang", ExitCode.HANG),
    _e(
        HANG_TRANSPORT_STALL,
        "hang",
        "error|warning",
        "every rank inside the same collective, nothing moves",
        "hang",
        ExitCode.HANG,
    ),
    _e(COLLECTIVE_SHAPE_MISMATCH, "hang", "error", "a collective completed with mismatched shapes"),
    _e(TEARDOWN_GLOO_ABORT, "hang", "warning", "torch 2.13 + gloo aborted a finished rank at exit"),
    _e(MULTINODE_PARTIAL_VIEW, "hang", "warning", "this node's records cover only part of the job"),
    _e(MULTINODE_LOST_NODE, "hang", "error", "a node of the job disappeared: its host, ranks and last state", "crash"),
    _e(ATTACH_RUNNING, "hang", "note", "attach: the job was running, what every rank was doing"),
    # post-mortem of torch's own records (analyze of flight-recorder dumps, error files, logs)
    _e(
        POSTMORTEM_NO_DUMP,
        "hang",
        "error|warning",
        "a rank left no flight-recorder dump: the first suspect",
        "crash",
        waited=("hang", ExitCode.HANG),
    ),
    _e(POSTMORTEM_MIXED_DUMPS, "hang", "warning", "the dumps come from different jobs, attempts or versions"),
    _e(RUNDIR_RECORDS_MISSING, "hang", "error", "a rank's records are deleted or cut in the run directory"),
    # check
    _e(
        DATA_MISSING_SET_EPOCH,
        "check",
        "error",
        "DistributedSampler.set_epoch not called: every epoch the same order",
    ),
    _e(DATA_SAMPLER_SEED_MISMATCH, "check", "error", "the ranks' DistributedSamplers have different seeds"),
    _e(DATA_SHARD_OVERLAP, "check", "error", "the ranks train on overlapping data"),
    _e(DATA_SHARD_GAPS, "check", "error", "the ranks together fetched only part of the data set"),
    _e(DATA_PADDING_DUPLICATES, "check", "note", "DistributedSampler pads with repeated samples (drop_last=False)"),
    _e(DATA_UNEVEN_BATCHES, "check", "warning", "the ranks' training DataLoaders have different lengths"),
    _e(DRIFT_INIT_MISMATCH, "check", "error", "parameters differ across ranks right after DDP(...)"),
    _e(DRIFT_PARAMETERS, "check", "error", "parameters drifted apart across ranks during training"),
    _e(DRIFT_BUFFERS, "check", "error", "buffers (BatchNorm statistics, counters) differ across ranks"),
    _e(SEED_IDENTICAL_STREAMS, "check", "note", "every rank starts with the same RNG state"),
    _e(CHECKPOINT_MULTIPLE_WRITERS, "check", "error", "several ranks write the same checkpoint file"),
    _e(PERF_GRAD_ACCUM_NO_SYNC, "check", "warning", "gradient accumulation without no_sync()"),
    # memleak
    _e(MEMLEAK_AUTOGRAD_GRAPH, "memleak", "error", "autograd graphs kept alive from step to step"),
    _e(MEMLEAK_TENSORS, "memleak", "error", "live tensors of one kind keep increasing"),
    _e(MEMLEAK_PYTHON_OBJECTS, "memleak", "error", "Python objects tracked by the GC keep increasing"),
    _e(MEMLEAK_DATALOADER_WORKERS, "memleak", "error", "DataLoader worker processes' memory grows"),
    _e(MEMLEAK_CUDA, "memleak", "error", "CUDA allocated memory grows step after step"),
    _e(
        MEMLEAK_CUDA_RESERVED,
        "memleak",
        "warning",
        "the CUDA caching allocator's reserved memory grows while allocated stays flat (fragmentation)",
    ),
    _e(
        MEMLEAK_CUDA_OUTSIDE_ALLOCATOR,
        "memleak",
        "error",
        "the process's GPU memory (NVML) grows outside PyTorch's caching allocator",
    ),
    _e(MEMLEAK_RSS, "memleak", "error", "process RSS grows with no more specific cause"),
    # profile
    _e(PROFILE_STRAGGLER, "profile", "warning", "a rank is slower than the others in one phase"),
    _e(PROFILE_DATALOADER_BOUND, "profile", "warning", "steps wait on the DataLoader"),
    _e(
        PROFILE_EXPOSED_COMM,
        "profile",
        "warning",
        "the gradient all-reduce runs on after backward: a large share of the step",
    ),
    _e(PROFILE_LOW_GPU_UTIL, "profile", "warning", "median GPU utilisation below 90 %"),
    _e(PROFILE_SUMMARY, "profile", "note", "each rank's median step split into phases"),
    # ddpdoctor's own probes
    _e(PROBE_INTERNAL_ERROR, "probe", "note", "a ddpdoctor probe failed inside a rank: the data it misses"),
    # doctor (the health check)
    _e(DOCTOR_NO_TORCH, "doctor", "error", "torch cannot be imported"),
    _e(DOCTOR_SOCKET_IFNAME, "doctor", "error|warning", "GLOO/NCCL_SOCKET_IFNAME names no usable interface"),
    _e(DOCTOR_MASTER_ADDR, "doctor", "error", "MASTER_ADDR does not resolve or is not this host's"),
    _e(DOCTOR_PORT_IN_USE, "doctor", "error", "the rendezvous port is taken"),
    _e(DOCTOR_MASTER_UNREACHABLE, "doctor", "error", "the rendezvous host cannot be reached"),
    _e(DOCTOR_SHM_SMALL, "doctor", "warning", "/dev/shm is too small for DataLoader workers and NCCL"),
    _e(DOCTOR_OPEN_FILES, "doctor", "warning", "the open-files limit is low for DDP"),
    _e(DOCTOR_GPU_ECC, "doctor", "warning", "a GPU reports uncorrected ECC errors"),
    _e(DOCTOR_LAUNCH_FAILED, "doctor", "error", "the health worker could not be launched"),
    _e(DOCTOR_INIT_FAILED, "doctor", "error", "init_process_group failed on some ranks"),
    _e(DOCTOR_WORLD_SIZE_MISMATCH, "doctor", "error", "fewer or more ranks joined than expected"),
    _e(DOCTOR_RANK_MISSING, "doctor", "error", "a rank left no result"),
    _e(DOCTOR_RANK_ERROR, "doctor", "error", "a rank of the health check raised"),
    _e(DOCTOR_HANG, "doctor", "error", "the health check did not finish in time"),
    _e(DOCTOR_COLLECTIVE_WRONG, "doctor", "error", "a collective gave a wrong result"),
    _e(DOCTOR_COLLECTIVE_FAILED, "doctor", "error", "a collective raised"),
    _e(DOCTOR_LOW_BUSBW, "doctor", "error", "all_reduce bus bandwidth below --min-busbw"),
    _e(DOCTOR_CLOCK_SKEW, "doctor", "warning", "the nodes' clocks differ"),
    _e(DOCTOR_FR_OLD_NAME, "doctor", "warning|note", "a flight-recorder variable under its old name"),
    _e(DOCTOR_FR_BUFFER_OFF, "doctor", "warning", "flight-recorder dumps asked for with a buffer of 0"),
    _e(DOCTOR_FR_DUMP_TMP, "doctor", "warning|error", "flight-recorder dumps to node-local /tmp or a missing folder"),
    _e(DOCTOR_FR_HEARTBEAT_TIMEOUT, "doctor", "warning", "heartbeat vs watchdog timeouts that defeat the dump"),
    _e(DOCTOR_DEBUG_DETAIL, "doctor", "warning", "TORCH_DISTRIBUTED_DEBUG=DETAIL left on"),
    _e(DOCTOR_PROBE_FAILED, "doctor", "error", "a built-in probe did not give its expected finding"),
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
