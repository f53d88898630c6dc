"""Run a function once a module is imported: a finder at the front of ``sys.meta_path`` that finds nothing
itself. At the import of its module it asks the finders after it for the spec, has the spec's loader call
the function once the module has run, and leaves ``sys.meta_path``. Stdlib only: cheap in any process
(rank/compiled.py waits so for torch._dynamo)."""

from __future__ import annotations

import sys
from typing import Any, Callable


class AfterImport:
    """Calls ``then(module)`` once ``name`` has been imported and run."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        spec = None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not a loader we know how to follow: the module runs as it is
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            self.leave()
            self.then(module)

        loader.exec_module = exec_module  # this spec's own loader object
        return spec

    def leave(self) -> None:
        """Off ``sys.meta_path``."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def after_import(name: str, then: Callable[[Any], None]) -> AfterImport:
    """Put an ``AfterImport`` for ``name`` at the front of ``sys.meta_path`` (unless one waits already)."""
    for f in sys.meta_path:
        if isinstance(f, AfterImport) and f.name == name and f.then is then:
            return f
    finder = AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    return finder
