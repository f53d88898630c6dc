"""The one notion of a step (rank/steps.py) on a fake rank-0 probe (tests/fakeprobe.py): each source built
around a stand-in original, never installed on torch, driven in the orders a job's shape makes: a plain
loop, several optimizers, gradient accumulation, GradScaler's skipped steps, a hand-written update, a loop
of forwards only; a backward seen through the first root parameter's post-accumulate-grad hook; the probes' after_step hooks see each step once, a failing one reported, never raised."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeprobe
import pytest
import torch

from ddpdoctor.rank import active, failures, steps
from ddpdoctor.record import schema


class Seen:
    family = "test"
    records = "the test records"

    def __init__(self, fail: bool = False) -> None:
        self.n: list[int] = []
        self.fail = fail

    def after_step(self, n: int) -> None:
        self.n.append(n)
        if self.fail:
            raise ValueError("probe bug")


@pytest.fixture
def probe(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    monkeypatch.setattr(failures, "_said", set())
    p.seen = Seen()
    p.steps.after = (p.seen.after_step,)
    p.steps.site = p.cost.site("steps")
    yield p
    fakeprobe.close(p)


def backward(model: Any = None) -> None:
    """The user's backward: a real one through ``model`` (its first parameter's hook sees it), else none."""
    if model is not None:
        model(torch.ones(1, 2)).sum().backward()


def forward(p: Any, model: Any = None) -> None:
    steps.forward_begins(p, model)


class Opt:
    """An optimizer: its step reaches torch's global post hook, as torch.optim's does."""

    def step(self) -> None:
        steps._optimizer_stepped(self, (), {})


def finish(p: Any) -> None:
    steps._Finish(p).finish()


def test_a_plain_loop_makes_one_step_per_optimizer_step(probe: Any) -> None:
    opt = Opt()
    for _ in range(3):
        forward(probe)
        backward()
        opt.step()
    finish(probe)
    assert (probe.steps.n, probe.steps.fwd, probe.steps.how) == (3, 3, {"optimizer": 3})
    assert probe.seen.n == [1, 2, 3]


def test_two_optimizers_stepped_one_after_the_other_are_one_step(probe: Any) -> None:
    g, d = Opt(), Opt()
    for _ in range(4):
        forward(probe)
        backward()
        g.step()
        d.step()
    assert probe.steps.n == 4
    # and one optimizer stepped twice with nothing seen between (no forward, no backward): two steps
    g.step()
    g.step()
    assert probe.steps.n == 6


def test_accumulated_micro_steps_are_one_step_from_the_first(probe: Any) -> None:
    model, opt = torch.nn.Linear(2, 1), Opt()
    for _ in range(6):
        for _ in range(4):  # nothing touches the parameters or their gradients between micro-steps
            forward(probe, model)
            backward(model)
        opt.step()
    assert (probe.steps.n, probe.steps.fwd, probe.steps.how) == (6, 24, {"optimizer": 6})


def test_a_step_the_grad_scaler_skips_is_still_a_step(probe: Any) -> None:
    opt = Opt()
    skipping = steps._scaler_step(lambda self, o: None)  # inf/NaN gradients: the optimizer does not step
    stepping = steps._scaler_step(lambda self, o: o.step())
    forward(probe)
    backward()
    skipping(object(), opt)
    forward(probe)
    backward()
    stepping(object(), opt)
    assert (probe.steps.n, probe.steps.how) == (2, {"skipped": 1, "optimizer": 1})


def update(model: Any) -> None:
    with torch.no_grad():
        for w in model.parameters():
            w -= 0.1  # a hand-written SGD: the parameters change
            w.grad = None


def test_a_hand_written_update_steps_at_each_backward_the_next_forward_follows(probe: Any) -> None:
    model = torch.nn.Linear(2, 1)
    for _ in range(3):
        forward(probe, model)
        backward(model)
        update(model)
    assert probe.steps.n == 2  # the third ends when the script does (at the next forward, else the end)
    finish(probe)
    assert (probe.steps.n, probe.steps.how) == (3, {"backward": 3})


def test_a_hand_written_update_after_two_micro_steps_is_one_step(probe: Any) -> None:
    model = torch.nn.Linear(2, 1)
    for _ in range(3):
        for _ in range(2):
            forward(probe, model)
            backward(model)  # gradients accumulate
        update(model)
    finish(probe)
    assert (probe.steps.n, probe.steps.fwd) == (3, 6)


def test_forwards_alone_are_steps_when_nothing_else_is_seen(probe: Any) -> None:
    for _ in range(3):
        forward(probe)
    finish(probe)
    assert (probe.steps.n, probe.steps.how) == (3, {"forward": 3})


def test_a_failing_after_step_hook_is_reported_and_the_steps_go_on(probe: Any) -> None:
    bad = Seen(fail=True)
    probe.steps.after = (bad.after_step, probe.seen.after_step)
    opt = Opt()
    for _ in range(2):
        forward(probe)
        backward()
        opt.step()
    assert bad.n == [1, 2] and probe.seen.n == [1, 2]
    errs = fakeprobe.kinds(fakeprobe.records(probe, schema.EVENTS), schema.K_PROBE_ERROR)
    assert len(errs) == 1 and "probe bug" in str(errs[0]), errs


def test_the_finish_event_says_the_steps_and_how_they_ended(probe: Any) -> None:
    opt = Opt()
    forward(probe)
    backward()
    opt.step()
    assert probe.steps.fields() == {"steps": 1, "root_forwards": 1, "step_ends": {"optimizer": 1}}
