"""The probes in the ranks of a user's own launch command (``ddpdoctor hang -- accelerate launch train.py``,
``-- bash run.sh``, torchrun's ``--no-python``): ddpdoctor does not start the ranks, so it enters them
through the environment.

The monitor adds two variables to the command's environment (launch/entry.py): ``PYTHONPATH`` with the
folder of ``entry/sitecustomize.py`` in front, and ``DDPDOCTOR_ENTER`` (the run directory, that folder, where
ddpdoctor is installed). Every Python process of the command then calls :func:`arm` at start-up, which only
puts a finder on ``sys.meta_path``: when (if ever) the process imports ``torch.distributed``, its
``init_process_group`` is wrapped, and the first call of it starts this rank's probe (:func:`_activate`),
exactly what ``python -m ddpdoctor.rank`` does under ddpdoctor's own torchrun. A process that never
initialises a process group (the launcher, torchrun's agent, DataLoader and compile workers) imports nothing
of torch because of ddpdoctor and records nothing.

The rank sees what it would see without the tool: the entry folder is off ``sys.path`` before the script
runs, and the two variables are taken out of ``os.environ`` (PYTHONPATH back to the command's own value) as
soon as the process is known to be a rank: at start-up where the launcher's worker variables say so
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, and the process is not itself a launcher), else when it calls
``init_process_group``. A launcher process keeps them: its children, the ranks, need them.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from ddpdoctor.rank import imports
from ddpdoctor.record.schema import ENTER_ENV as ENV

# a process started as one of these is a launcher, whatever RANK/WORLD_SIZE its environment holds (a site's
# script that exports RANK before calling torchrun): its children are the ranks
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch", "torchrun", "accelerate", "deepspeed")
_WORKER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")

_cfg: dict[str, Any] | None = None
_active = False  # this process's probe is started (or its start was tried): init_process_group is the real one


def is_launcher(argv: list[str]) -> bool:
    """``argv`` (``sys.orig_argv``: python and its arguments) starts a launcher: ``-m torch.distributed.run``,
    or a launcher's console script (``.../bin/torchrun``, ``accelerate``, ``deepspeed``)."""
    args = argv[1:]
    if "-m" in args and args.index("-m") + 1 < len(args):
        mod = args[args.index("-m") + 1]
        return any(mod == m or mod.startswith(m + ".") for m in LAUNCHERS)
    first = next((a for a in args if not a.startswith("-")), "")
    return os.path.basename(first) in LAUNCHERS


def looks_like_rank(env: Any, argv: list[str]) -> bool:
    """The process was started as a launcher's worker (torchrun's, accelerate's, deepspeed's environment)."""
    return all(k in env for k in _WORKER_VARS) and not is_launcher(argv)


def arm(cfg: dict[str, Any], entry: str) -> None:
    """Called by entry/sitecustomize.py at start-up: remember where the run is, wait for torch.distributed."""
    global _cfg
    _cfg = {**cfg, "entry": entry}
    if looks_like_rank(os.environ, list(getattr(sys, "orig_argv", sys.argv))):
        restore_env(os.environ, _cfg)
    imports.after_import("torch.distributed", _wrap_init)


def restore_env(env: Any, cfg: dict[str, Any]) -> None:
    """Take ddpdoctor's additions out of ``env``: ``DDPDOCTOR_ENTER``, and the entry folder from PYTHONPATH
    (the rest is the command's own: a script that added its folder keeps it); PYTHONPATH is removed where the
    user had none and nothing else was added."""
    env.pop(ENV, None)
    parts = (env.get("PYTHONPATH") or "").split(os.pathsep)
    if cfg.get("entry") in parts:
        parts.remove(cfg["entry"])
    rest = os.pathsep.join(parts)
    if rest or cfg.get("pythonpath") is not None:
        env["PYTHONPATH"] = rest
    else:
        env.pop("PYTHONPATH", None)


def _wrap_init(dist: Any) -> None:
    import functools

    real = getattr(dist, "init_process_group", None)
    if real is None:  # a torch built without distributed support
        return

    @functools.wraps(real)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if _active:
            return real(*args, **kwargs)
        return _first_init(real, dist, args, kwargs)

    dist.init_process_group = init_process_group


def _rank_world(real: Callable, args: tuple, kwargs: dict) -> tuple[int | None, int | None]:
    """The rank and world size this init_process_group call will have, where its arguments or the
    environment (``env://``) say so before it runs."""
    import inspect

    try:
        bound = inspect.signature(real).bind_partial(*args, **kwargs).arguments
    except TypeError:
        bound = {}

    def pick(key: str, var: str) -> int | None:
        v = bound.get(key)
        if isinstance(v, int) and v >= 0:
            return v
        try:
            return int(os.environ[var])
        except (KeyError, ValueError):
            return None

    return pick("rank", "RANK"), pick("world_size", "WORLD_SIZE")


def _first_init(real: Callable, dist: Any, args: tuple, kwargs: dict) -> Any:
    """The process's first init_process_group: start the probe, then initialise through the probes' own
    wrapper (which records the init). A rank whose number only the init can tell starts its probe after it."""
    global _active
    rank, world = _rank_world(real, args, kwargs)
    _active = True
    if rank is None:
        out = real(*args, **kwargs)
        if _activate(dist, dist.get_rank(), dist.get_world_size()):
            from ddpdoctor.rank import wrappers

            # the probes' init wrapper around an init already made: it records the init, as for any rank
            wrappers._init_process_group(lambda *a, **k: out, dist)(*args, **kwargs)
        return out
    _activate(dist, rank, world)
    return dist.init_process_group(*args, **kwargs)


def _activate(dist: Any, rank: int, world: int | None) -> bool:
    """Start this rank's probe as ddpdoctor's bootstrap does; False where it could not (the report then names
    the rank as one the probes could not enter)."""
    cfg = _cfg or {}
    restore_env(os.environ, cfg)
    shim = sys.modules.get("sitecustomize")
    if os.path.dirname(os.path.abspath(getattr(shim, "__file__", None) or os.sep)) == cfg.get("entry"):
        del sys.modules["sitecustomize"]  # the user had none: the rank's sys.modules is as without the tool
    try:
        import atexit
        import socket

        from ddpdoctor.rank import probe, rankfiles, sites, wrappers
        from ddpdoctor.rank.bootstrap import attempt_run_dir

        run_dir, manifest = attempt_run_dir(cfg["run_dir"], rankfiles.read_manifest(cfg["run_dir"]))
        for k, v in (manifest.get("own_env") or {}).items():  # PET_NO_PYTHON: kept from torchrun, the rank's
            os.environ.setdefault(k, str(v))
        main = sys.modules.get("__main__")
        script = str(getattr(main, "__file__", None) or sys.argv[0] or "")
        if script:
            sites.add_script_dir(os.path.abspath(script))
        p = probe.Probe(run_dir, rank, manifest)
        rankfiles.enable_faulthandler(p.dir)
        p.start(
            local_rank=_env_int("LOCAL_RANK", 0),
            host=socket.gethostname(),
            script=sys.argv[0] if sys.argv else script,
            world_size=world if world is not None else 1,
            node_rank=_env_int("GROUP_RANK", 0),
            # the launcher's ranks on this node: more ranks than these in the world are on other nodes
            local_world_size=_env_int("LOCAL_WORLD_SIZE", None),
        )
        wrappers.install(p, manifest)
        atexit.register(_finish, p)
        return True
    except Exception:  # noqa: BLE001 - the rank runs on without probes; the report names it as not entered
        return False


def _env_int(name: str, default: int | None) -> int | None:
    v = os.environ.get(name, "")
    return int(v) if v.isdigit() else default


def _finish(p: Any) -> None:
    """At the interpreter's exit: the rank's finish record. An exception that ended the script is in
    ``sys.last_value`` (set before the traceback is printed); ``sys.exit(N)`` leaves no trace the process
    can read at exit, so its code is the launcher's (the report reads the command's exit code)."""
    from ddpdoctor.rank import rankfiles

    exc = getattr(sys, "last_value", None)
    if isinstance(exc, BaseException) and not isinstance(exc, SystemExit):
        p.finish(1, rankfiles.error_record(exc), exception=True)
    else:
        p.finish(0, exception=False)
