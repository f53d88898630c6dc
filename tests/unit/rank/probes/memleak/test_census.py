"""memleak's holders, store sites and census in-process: a user's training code (a small file in tmp_path,
imported) keeps graph-attached losses somewhere; the scan names that holder as the code writes it and the
line that stores into it; the census groups the live tensors and counts the graph nodes."""

from __future__ import annotations

import gc
import importlib.util
import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ddpdoctor.rank import sites
from ddpdoctor.rank.probes.memleak import census, storesite

USER_CODE = textwrap.dedent("""\
    import torch

    CACHE = {}


    def make_loss(w, i):
        return (w * (i + 1)).sum()


    class Trainer:
        def __init__(self):
            self.history = []

        def step(self, loss):
            self.history.append(loss)   # STORE-SELF


    class Recorder:
        history = []

        def record(self, loss):
            Recorder.history.append(loss)   # STORE-CLASS


    def remember(i, loss):
        CACHE[i] = loss   # STORE-DICT


    def make_keeper():
        kept = []

        def keep(loss):
            kept.append(loss)   # STORE-CLOSURE
        return keep


    def log_loss(loss, seen=[], on_step=None):
        seen.append(loss)   # STORE-DEFAULT
        if on_step is not None:
            on_step()


    def train_instance(steps, on_step):
        w = torch.ones(3, requires_grad=True)
        trainer = Trainer()
        for i in range(steps):
            trainer.step(make_loss(w, i))
            on_step()
        return trainer


    def train_class(steps, on_step):
        w = torch.ones(3, requires_grad=True)
        rec = Recorder()
        for i in range(steps):
            rec.record(make_loss(w, i))
            on_step()


    def train_dict(steps, on_step):
        w = torch.ones(3, requires_grad=True)
        for i in range(steps):
            remember(i, make_loss(w, i))
            on_step()


    def train_closure(steps, on_step):
        w = torch.ones(3, requires_grad=True)
        keep = make_keeper()
        for i in range(steps):
            keep(make_loss(w, i))
            on_step()


    def train_default(steps, on_step, inside=False):
        w = torch.ones(3, requires_grad=True)
        for i in range(steps):
            if inside:
                log_loss(make_loss(w, i), on_step=on_step)
            else:
                log_loss(make_loss(w, i))
                on_step()


    def train_deep(steps, on_step, depth):
        w = torch.ones(5, dtype=torch.float64, requires_grad=True)
        losses = []
        for i in range(steps):
            y = w
            for _ in range(depth):
                y = y * 1.5
            losses.append(y.sum())   # STORE-DEEP
            on_step()
        return losses
    """)

_n = itertools.count()


def _user_module(tmp_path: Path, stem: str, code: str) -> Iterator[Any]:
    """``code`` as the user's module ``stem``.py, imported from tmp_path (a module of its own in sys.modules)."""
    path = tmp_path / f"{stem}.py"
    path.write_text(code)
    name = f"ddpdoctor_unit_{stem}_{next(_n)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    sites.reset_prefixes()
    yield mod
    del sys.modules[name]
    gc.collect()


@pytest.fixture
def user(tmp_path: Path) -> Iterator[Any]:
    """The user's training module."""
    yield from _user_module(tmp_path, "user_train", USER_CODE)


def line_of(mod: Any, marker: str) -> int:
    for i, text in enumerate(Path(mod.__file__).read_text().splitlines(), 1):
        if marker in text:
            return i
    raise AssertionError(marker)


def scan_each_step(train: Any, *args: Any, **kwargs: Any) -> list[tuple[int, int, dict | None]]:
    """Run ``train`` and scan the graphs the user's names reach at each step, as the memleak probe does
    from its optimizer-step hook (the frame: the user's loop)."""
    got: list = []

    def on_step() -> None:
        got.append(census.local_graphs(sys._getframe(1), {}))

    train(*args, on_step, **kwargs)
    return got


def assert_holder(h: dict | None, mod: Any, name: str, marker: str, func: str) -> None:
    assert h is not None, "no holder named"
    assert (h["name"], h["file"], h["line"], h["func"]) == (name, mod.__file__, line_of(mod, marker), func)
    assert h["container"] is True


def test_self_attribute_of_a_user_object_is_named_self_history(user: Any) -> None:
    scans = scan_each_step(user.train_instance, 4)
    nodes, roots, holder = scans[-1]
    # 4 losses: Sum + Mul each, one AccumulateGrad of the shared weight
    assert (nodes, roots) == (4 * 2 + 1, 4)
    assert_holder(holder, user, "self.history", "STORE-SELF", "step")
    assert holder is not None and holder["path"] == "trainer.history" and holder["nodes"] == 9
    assert [s[0] for s in scans] == [3, 5, 7, 9]  # the graph the scan sees grows step by step


def test_class_attribute_is_named_as_written(user: Any) -> None:
    nodes, roots, holder = scan_each_step(user.train_class, 3)[-1]
    assert (nodes, roots) == (7, 3)
    assert_holder(holder, user, "Recorder.history", "STORE-CLASS", "record")
    assert holder is not None and holder["path"] == "Recorder.history"


def test_module_global_dict_is_named_with_its_item_assignment(user: Any) -> None:
    nodes, roots, holder = scan_each_step(user.train_dict, 5)[-1]
    assert (nodes, roots) == (11, 5)
    # `CACHE = {}` is a plain assignment: the line that stores into it is `CACHE[i] = loss`
    assert_holder(holder, user, "CACHE", "STORE-DICT", "remember")


def test_closure_cell_is_named_as_the_closure_writes_it(user: Any) -> None:
    nodes, roots, holder = scan_each_step(user.train_closure, 3)[-1]
    assert (nodes, roots) == (7, 3)
    assert_holder(holder, user, "kept", "STORE-CLOSURE", "keep")
    assert holder is not None and holder["path"] == "keep.<closure>.kept"


def test_default_argument_seen_while_its_function_runs(user: Any) -> None:
    nodes, roots, holder = scan_each_step(user.train_default, 3, inside=True)[-1]
    assert (nodes, roots) == (7, 3)
    assert_holder(holder, user, "seen", "STORE-DEFAULT", "log_loss")


def test_default_argument_is_found_after_its_function_returned(user: Any) -> None:
    nodes, roots, holder = scan_each_step(user.train_default, 3)[-1]
    assert (nodes, roots) == (7, 3)
    assert_holder(holder, user, "seen", "STORE-DEFAULT", "log_loss")


def test_no_graph_kept_no_holder(user: Any) -> None:
    def train(steps: int, on_step: Any) -> None:
        w = torch.ones(3, requires_grad=True)
        for i in range(steps):
            loss = (w * i).sum()
            loss.backward()
            del loss
            on_step()

    scans = scan_each_step(train, 3)
    assert scans[-1] == (0, 0, None)


def test_store_site_prefers_the_growing_store_to_the_plain_assignment(user: Any) -> None:
    trainer = user.Trainer()
    holder = ("trainer.history", ("attr", "history"), ("class", user.Trainer))
    site = storesite.store_site(holder, sys._getframe())
    assert site == {"name": "self.history", "file": user.__file__, "line": line_of(user, "STORE-SELF"), "func": "step"}
    del trainer


# -- census -----------------------------------------------------------------------------------------------


def _group(c: dict, shape: list, dtype: str, grad: bool) -> dict | None:
    return next(
        (
            g
            for g in c["groups"]
            if g["shape"] == shape and g["dtype"] == dtype and g["device"] == "cpu" and g["grad_fn"] is grad
        ),
        None,
    )


def test_census_groups_live_tensors_by_shape_dtype_device(user: Any) -> None:
    gc.collect()
    before = census.census(sys._getframe(), {})
    kept = [torch.zeros(61, 67, dtype=torch.float64) for _ in range(7)]
    ints = [torch.zeros(13, dtype=torch.int16) for _ in range(3)]
    after = census.census(sys._getframe(), {})
    g = _group(after, [61, 67], "float64", False)
    assert g is not None and g["count"] == 7 and g["bytes"] == 7 * 61 * 67 * 8
    gi = _group(after, [13], "int16", False)
    assert gi is not None and gi["count"] == 3 and gi["bytes"] == 3 * 13 * 2
    assert after["tensors"] - before["tensors"] == 10
    assert after["tensor_bytes"]["cpu"] - before["tensor_bytes"].get("cpu", 0) == 7 * 61 * 67 * 8 + 3 * 13 * 2
    assert after["graph_nodes"] == before["graph_nodes"]  # nothing of these carries a graph
    # the biggest group's sample tensor is held by the test's own list, named as written
    holder = after["group_holders"].get("[61, 67]|float64|cpu|False")
    assert holder is not None and holder["path"] == "kept" and holder["container"] is True
    del kept, ints


def test_census_sees_a_list_of_graph_attached_losses(user: Any) -> None:
    gc.collect()
    steps, depth = 6, 40
    got: list = []

    def on_step() -> None:
        if len(got) == 0 or len(got) == steps - 1:
            got.append(census.census(sys._getframe(1), {}))
        else:
            got.append(None)

    losses = user.train_deep(steps, on_step, depth)
    first, last = got[0], got[-1]
    g = _group(last, [], "float64", True)
    assert g is not None and g["count"] == steps
    # per loss: Sum + depth Muls, one AccumulateGrad of the shared weight
    assert last["graph_nodes"] - first["graph_nodes"] == (steps - 1) * (depth + 1)
    big = last["biggest_graphs"][0]
    assert big["shape"] == [] and big["nodes"] == depth + 2
    h = big["holder"]
    assert h is not None and (h["name"], h["line"], h["func"]) == ("losses", line_of(user, "STORE-DEEP"), "train_deep")
    del losses


# -- holders found from the growth upwards (referrers.py) -------------------------------------------------

FRAMEWORK_CODE = textwrap.dedent("""\
    import torch


    class Collector:
        def __init__(self):
            self._epoch_logits = []

        def on_batch_end(self, logits):
            self._epoch_logits.append(logits)   # STORE-CALLBACK


    class Slotted:
        __slots__ = ("recent",)

        def __init__(self):
            self.recent = []


    def keep_in_slot(holder, loss):
        holder.recent.append(loss)   # STORE-SLOT


    def make_hook():
        seen = {}

        def hook(i, loss):
            seen[i] = loss   # STORE-HOOK
        return hook
    """)


@pytest.fixture
def framework_user(tmp_path: Path) -> Iterator[Any]:
    """User code whose holders no frame names while the loop runs (a callback kept in a library's list)."""
    yield from _user_module(tmp_path, "user_callbacks", FRAMEWORK_CODE)


def _censuses_while(step: Any, steps: int, at: set[int]) -> list[dict]:
    """Run ``step(i)`` and take a census at the given steps from a frame that names none of the holders
    (as the probe's hook does under a framework's loop), with the growth state the probe keeps."""
    growth = census.Growth()
    out = []
    for i in range(steps):
        step(i)
        if i in at:
            out.append(census.census(None, {}, growth))
    return out


def _grown_holder(c: dict, group: str) -> dict | None:
    return next((g.get("holder") for g in c.get("grown") or () if g["group"] == group), None)


def test_a_callback_that_only_a_library_list_holds_is_named_from_its_growth(framework_user: Any) -> None:
    library_callbacks = [[framework_user.Collector()]]  # as a Trainer keeps them: no user frame names it
    w = torch.ones(4, 3, requires_grad=True)
    current: dict = {}  # this step's logits, also alive (the youngest member of the group)

    def step(i: int) -> None:
        current["logits"] = torch.randn(2, 4) @ w
        library_callbacks[0][0].on_batch_end(current["logits"])

    cs = _censuses_while(step, 24, {3, 11, 23})
    h = _grown_holder(cs[-1], "[2, 3]|float32|cpu|True")
    assert h is not None
    assert (h["name"], h["owner"], h["func"], h["line"]) == (
        "self._epoch_logits",
        "Collector",
        "on_batch_end",
        line_of(framework_user, "STORE-CALLBACK"),
    )
    assert h["container"] is True


def test_a_slot_and_a_closure_dict_are_named_from_their_growth(framework_user: Any) -> None:
    holder = framework_user.Slotted()
    hook = framework_user.make_hook()
    registry = {"hooks": [hook], "holders": (holder,)}  # a library's registry keeps both

    def step(i: int) -> None:
        framework_user.keep_in_slot(registry["holders"][0], torch.randn(5, dtype=torch.float64))
        registry["hooks"][0](i, torch.randn(7, dtype=torch.float16))

    cs = _censuses_while(step, 30, {4, 14, 29})
    slot = _grown_holder(cs[-1], "[5]|float64|cpu|False")
    assert slot is not None and (slot["name"], slot["line"]) == ("holder.recent", line_of(framework_user, "STORE-SLOT"))
    cell = _grown_holder(cs[-1], "[7]|float16|cpu|False")
    assert cell is not None and (cell["name"], cell["line"], cell["func"]) == (
        "seen",
        line_of(framework_user, "STORE-HOOK"),
        "hook",
    )


def test_a_found_holder_becomes_a_root_of_the_graph_scan(framework_user: Any) -> None:
    library_callbacks = [framework_user.Collector()]
    w = torch.ones(4, 3, requires_grad=True)
    growth = census.Growth()
    scans = []
    for i in range(12):
        library_callbacks[0].on_batch_end(torch.randn(2, 4) @ w)
        if i in (1, 3, 5):  # the third census sees the group grow a second time: its holder is searched
            census.census(None, {}, growth)
        scans.append(census.local_graphs(None, {}, growth))
    # before the census found it, nothing the stack names reaches the graphs; after, the scan sees them grow
    assert scans[0][0] == 0 and scans[4][0] == 0 and scans[-1][0] > scans[6][0] > 0
    h = scans[-1][2]
    assert (
        h is not None and h["name"] == "self._epoch_logits" and h["line"] == line_of(framework_user, "STORE-CALLBACK")
    )
    del library_callbacks
    gc.collect()
    assert census.local_graphs(None, {}, growth)[0] == 0  # a root is held weakly: the user's object can go


def test_holder_search_floor_searches_an_unnamed_group_then_says_why_it_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 37: a grown group whose holder is unnamed is searched FLOOR_SEARCHES times even when the
    search budget is spent; after that its entry says "skipped"; a search the CPU cap cut says "capped"."""
    import sys as _sys
    import time

    from ddpdoctor.rank.probes.memleak import census as census_mod
    from ddpdoctor.rank.probes.memleak import referrers

    class Kept:
        pass

    g = census_mod.Growth()
    key = ((4,), "float32", "cpu", True)
    kept = [Kept() for _ in range(3)]  # held by this frame's local list only: no user holder is found
    searches = []
    real = referrers.find
    monkeypatch.setattr(referrers, "find", lambda *a, **k: searches.append(1) or real(*a, **k))
    for i in range(census_mod.FLOOR_SEARCHES + 1):
        # the budget is spent: the last search was just now and cost an hour
        g.search_cost, g.last_search_t = 3600.0, time.perf_counter()
        (entry,) = census_mod._grown_holders({key: list(kept)}, {key: 3}, g, _sys._getframe(), {})
        want = "ran" if i < census_mod.FLOOR_SEARCHES else "skipped"
        assert entry.get("search") == want and "holder" not in entry, (i, entry)
    assert len(searches) == census_mod.FLOOR_SEARCHES
    monkeypatch.setattr(referrers, "TIME_CAP_S", -1.0)  # every level over the cap: cut short
    g2 = census_mod.Growth()
    (entry,) = census_mod._grown_holders({key: list(kept)}, {key: 3}, g2, _sys._getframe(), {})
    assert entry["search"] == "capped" and g2.capped == 1
