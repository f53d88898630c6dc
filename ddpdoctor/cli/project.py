"""A project's defaults: the ``[tool.ddpdoctor]`` table of the nearest ``pyproject.toml`` that has one (the
working directory, then its parents: ruff's rule), and ``--select``/``--ignore`` merged with it.

    [tool.ddpdoctor]
    select = ["hang", "crash", "data"]        # ids or families; default: every finding
    ignore = ["seed.identical-streams"]

``--select`` on the command line replaces the table's ``select``; ``--ignore`` adds to its ``ignore``.
Stdlib (and tomli before Python 3.11) only: ``ddpdoctor --help`` must not import torch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ddpdoctor.errors import DdpdoctorError

KEYS = ("select", "ignore")


def _load_toml(path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the package depends on tomli there
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise DdpdoctorError(f"cannot read {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise DdpdoctorError(f"{path}: not valid TOML: {e}") from None


def find_table(start: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """The nearest ``pyproject.toml`` with a ``[tool.ddpdoctor]`` table, from ``start`` (the working
    directory) up, and that table; ``(None, {})`` when there is none. A bad table: one line, exit 2."""
    d = os.path.abspath(start or os.getcwd())
    while True:
        path = os.path.join(d, "pyproject.toml")
        if os.path.isfile(path):
            table = _load_toml(path).get("tool", {}).get("ddpdoctor")
            if table is not None:
                if not isinstance(table, dict):
                    raise DdpdoctorError(f"{path}: [tool.ddpdoctor] must be a table")
                unknown = sorted(set(table) - set(KEYS))
                if unknown:
                    raise DdpdoctorError(
                        f"{path}: [tool.ddpdoctor] has no key {unknown[0]!r} (keys: {', '.join(KEYS)})"
                    )
                for k in KEYS:
                    v = table.get(k, [])
                    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                        raise DdpdoctorError(f"{path}: [tool.ddpdoctor] {k} must be a list of finding ids")
                return path, table
        parent = os.path.dirname(d)
        if parent == d:
            return None, {}
        d = parent


def _split(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``("hang,crash", "data")`` -> ``("hang", "crash", "data")``: repeated or comma-separated, like ruff."""
    return tuple(x.strip() for v in values for x in v.split(",") if x.strip())


def selection(
    select: tuple[str, ...] = (), ignore: tuple[str, ...] = (), start: str | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ``(select, ignore)`` a command applies: the options merged with the project's table, every name
    checked against the catalog (one line and exit 2 for a name that is no id or family)."""
    from ddpdoctor.analysis.catalog import check_names

    path, table = find_table(start)
    sel, ign = _split(select), _split(ignore)
    tsel, tign = _split(table.get("select", [])), _split(table.get("ignore", []))
    where = f"{path} [tool.ddpdoctor]"
    check_names(tsel, f"{where} select:")
    check_names(tign, f"{where} ignore:")
    check_names(sel, "--select")
    check_names(ign, "--ignore")
    return (sel or tsel), tuple(dict.fromkeys(tign + ign))
