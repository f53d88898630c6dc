"""ddpdoctor's way into the Python processes of a user's own launch command (``ddpdoctor hang -- COMMAND``).

The monitor prepends this folder to PYTHONPATH, so every Python process the command starts imports this file
at start-up (site.py). It takes its folder off ``sys.path``, arms ddpdoctor.rank.enter (which does nothing until
the process calls ``init_process_group``), then runs the user's own ``sitecustomize`` as if this one were not
there. It never stops a process from starting: whatever fails here is ddpdoctor's loss, not the user's.
"""


def _enter() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if not (p and os.path.abspath(p) == here)]
    raw = os.environ.get("DDPDOCTOR_ENTER")  # record/schema.py ENTER_ENV
    if not raw:
        return
    try:
        import json

        cfg = json.loads(raw)
        root = str(cfg["root"])  # where ddpdoctor is installed: the command's Python may not have it
        added = root not in sys.path
        if added:
            sys.path.append(root)  # last: a ddpdoctor of the process's own environment comes first
        try:
            from ddpdoctor.rank import enter

            enter.arm(cfg, here)
        finally:
            if added and root in sys.path:
                sys.path.remove(root)
    except Exception:  # noqa: BLE001 - a process the probes cannot enter is named in the report
        pass


_enter()
del _enter

# the user's own sitecustomize, found further along sys.path; it replaces this module in sys.modules, and
# its errors reach site.py, which reports them as it would without ddpdoctor
_me = __import__("sys").modules.pop(__name__)
try:
    import sitecustomize  # noqa: F401
except ImportError as _e:
    if _e.name != __name__:
        raise
    __import__("sys").modules[__name__] = _me  # none of the user's: importlib expects this module back
