"""Run the user's script inside a rank exactly as ``python script.py`` would, with probes installed.

The script sees the same ``sys.argv``, ``sys.path[0]``, ``__name__ == "__main__"``, environment and
output; the only trace of ddpdoctor is its probes.
"""

from __future__ import annotations

import os
import socket
import sys
import types
from types import TracebackType
from typing import Any

from ddpdoctor.rank.rankfiles import enable_faulthandler, error_record, read_manifest
from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter

# What torchrun adds to a worker's environment; removed again when the script starts its own ranks.
TORCHRUN_ENV_PREFIXES = ("TORCHELASTIC_",)
TORCHRUN_ENV = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_ASYNC_ERROR_HANDLING",
    "CUDA_MODULE_LOADING",
}


def scrub_torchrun_env(user_keys: list[str]) -> None:
    keep = set(user_keys)
    for k in list(os.environ):
        if k not in keep and (k in TORCHRUN_ENV or k.startswith(TORCHRUN_ENV_PREFIXES)):
            del os.environ[k]


def _trim(tb: TracebackType | None, script: str) -> TracebackType | None:
    """Drop ddpdoctor's and runpy's frames so the printed traceback is what plain python prints."""
    t = tb
    while t is not None and os.path.abspath(t.tb_frame.f_code.co_filename) != script:
        t = t.tb_next
    return t or tb


def _exec_as_main(abs_script: str) -> None:
    """What ``python script.py`` does (runpy.run_path would rewrite sys.argv[0] to the absolute path)."""
    import builtins
    from importlib.machinery import SourceFileLoader

    with open(abs_script, "rb") as f:
        source = f.read()
    code = compile(source, abs_script, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=abs_script,
        __builtins__=builtins,
        __cached__=None,
        __spec__=None,
        __loader__=SourceFileLoader("__main__", abs_script),
    )
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _exec_module_as_main(name: str) -> str:
    """What ``python -m NAME`` does: the parent packages imported, the module's code run as ``__main__`` in a
    fresh module with the module's ``__spec__``, ``__package__`` and ``__file__``; ``sys.argv[0]`` is its
    file, ``sys.path[0]`` the working directory (as it is already: torchrun ran ``python -m
    ddpdoctor.rank`` there). Returns the module's file."""
    import builtins
    import runpy

    # runpy's own lookup, the one ``python -m`` uses (it imports the parents, and finds a package's __main__)
    mod_name, spec, code = runpy._get_module_details(name)  # type: ignore[attr-defined]
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=spec.origin,
        __builtins__=builtins,
        __cached__=spec.cached,
        __spec__=spec,
        __loader__=spec.loader,
        __package__=mod_name.rpartition(".")[0],
    )
    sys.argv[0] = spec.origin
    sys.modules["__main__"] = main
    exec(code, main.__dict__)
    return str(spec.origin)


def _restore_env(manifest: dict[str, Any]) -> None:
    """The ``PET_*`` variables of the torchrun options the tool took over (``-m``, the logging options) were
    kept from torchrun, which would have read them beside the tool's own arguments; the script sees them, as
    it would under bare torchrun."""
    for k, v in (manifest.get("own_env") or {}).items():
        os.environ.setdefault(k, str(v))


def run_target(manifest: dict[str, Any], script: str, args: list[str], on_exit: Any) -> int:
    """Run the script, or with ``"module"`` in the manifest the module of that name, as ``__main__``."""
    _restore_env(manifest)
    if manifest.get("module"):
        return run_script(script, args, on_exit, module=True, path=str(manifest.get("script_path") or ""))
    return run_script(script, args, on_exit)


def run_script(script: str, args: list[str], on_exit: Any, module: bool = False, path: str = "") -> int:
    """Run ``script`` as ``__main__`` (``module``: the module of that name, at ``path`` as the launcher found
    it). ``on_exit(code, exc)`` records how it ended. Returns the exit code."""
    abs_script = os.path.abspath(path if module else script)
    from ddpdoctor.rank import sites

    sites.add_script_dir(abs_script)
    sys.argv = [abs_script if module else script, *args]
    if not module:
        sys.path[0] = os.path.dirname(abs_script)
    try:
        if module:
            abs_script = _exec_module_as_main(script)
        else:
            _exec_as_main(abs_script)
    except SystemExit as e:
        code = e.code
        on_exit(code if isinstance(code, int) or code is None else 1, None)
        raise
    except BaseException as e:
        on_exit(1, e)
        tb = _trim(e.__traceback__, abs_script)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        return 1
    on_exit(0, None)
    return 0


def attempt_run_dir(run_dir: str, manifest: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The run directory this rank writes, and its manifest: the run directory itself on torchrun's first
    attempt; on attempt k of an elastic restart (``TORCHELASTIC_RESTART_COUNT=k``, set by torchrun, not by us)
    ``RUN_DIR/attempts/<k>/``, so that each attempt's records stay apart and the rest of the rank side works
    on it unchanged (record/attempts.py)."""
    from ddpdoctor.record import attempts

    k = attempts.restart_count(os.environ)
    if k <= 0:
        return run_dir, manifest
    try:
        return attempts.make(run_dir, manifest, k)
    except OSError:
        # the attempt's folder cannot be made: write over attempt 0's records rather than lose this attempt's
        return run_dir, manifest


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m ddpdoctor.rank RUN_DIR SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    run_dir, script, args = argv[0], argv[1], argv[2:]
    run_dir, manifest = attempt_run_dir(run_dir, read_manifest(run_dir))
    if manifest.get("mode") == "spawn":
        return _main_spawn(run_dir, manifest, script, args)
    from ddpdoctor.rank import probe, wrappers

    rank = int(os.environ.get("RANK", "0"))
    p = probe.Probe(run_dir, rank, manifest)
    enable_faulthandler(p.dir)
    p.start(
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        host=socket.gethostname(),
        script=script,
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        node_rank=int(os.environ.get("GROUP_RANK") or 0),
    )
    wrappers.install(p, manifest)

    def on_exit(code: Any, exc: BaseException | None) -> None:
        p.finish(code, error_record(exc) if exc is not None else None, exception=exc is not None)

    return run_target(manifest, script, args, on_exit)


def _main_spawn(run_dir: str, manifest: dict[str, Any], script: str, args: list[str]) -> int:
    """The script starts its own ranks (torch.multiprocessing.spawn): probe the children instead."""
    scrub_torchrun_env(manifest.get("user_env_keys", []))
    from ddpdoctor.rank import spawn

    spawn.install(run_dir)
    log = JsonlWriter(os.path.join(run_dir, schema.LAUNCHER))
    log.write(schema.K_START, None, pid=os.getpid(), script=script)

    def on_exit(code: Any, exc: BaseException | None) -> None:
        log.write(schema.K_FINISH, None, code=code, error=error_record(exc) if exc is not None else None)

    return run_target(manifest, script, args, on_exit)
