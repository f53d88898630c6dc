"""The check probes' Checks in-process on a fake rank-0 probe: a pass's window counts the steps and
forwards inside it and what it handed out, training marks the open passes, optimizer steps record their
synced/unsynced forwards, finish writes the accumulation histogram, fingerprints tell equal weights
from different ones."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import fakeprobe
import pytest
import torch

from ddpdoctor.rank.probes.check.state import Checks
from ddpdoctor.record import schema


@pytest.fixture
def checks(fake_probe: Any):
    c = Checks(fake_probe, None)
    yield c
    c.w.close()
    c.fp.close()
    fakeprobe.close(fake_probe)


def _recs(c: Checks, *kind: str, name: str = schema.CHECKS) -> list[dict]:
    return fakeprobe.kinds(fakeprobe.records(c.p, name), *kind)


def test_a_pass_that_saw_a_step_records_its_steps_and_what_it_handed_out(checks: Checks) -> None:
    inner = iter(range(5))
    ps = checks.open_pass("sampler", 0, 0, 5, inner)
    next(inner), next(inner)
    checks.on_module_forward(True)
    checks.on_opt_step()
    checks.close_pass(ps, "freed")
    checks.close_pass(ps, "again")  # closed once
    (end,) = _recs(checks, schema.K_SAMPLER_END)
    assert (end["steps"], end["fwds"], end["consumed"], end["exhausted"], end["why"]) == (1, 1, 2, False, "freed")
    assert [(e["by"], e["k"]) for e in _recs(checks, schema.K_SAMPLER_TRAIN)] == [("fwd", 0), ("step", 0)]


def test_a_peek_without_training_is_not_marked_and_a_drained_pass_is_exhausted(checks: Checks) -> None:
    inner = iter(range(3))
    ps = checks.open_pass("sampler", 1, 0, 3, inner)
    list(inner)
    checks.on_module_forward(False)  # an evaluation forward: no grad
    checks.close_pass(ps, "freed")
    (end,) = _recs(checks, schema.K_SAMPLER_END)
    assert (end["steps"], end["fwds"], end["consumed"], end["exhausted"]) == (0, 0, 3, True)
    assert _recs(checks, schema.K_SAMPLER_TRAIN) == []


def test_optimizer_steps_record_the_synced_and_no_sync_forwards_and_finish_their_histogram(checks: Checks) -> None:
    synced, unsynced = (
        SimpleNamespace(require_backward_grad_sync=True),
        SimpleNamespace(require_backward_grad_sync=False),
    )
    for _ in range(2):
        checks.on_forward(unsynced)
        checks.on_forward(unsynced)
        checks.on_forward(synced)
        checks.on_opt_step()
    with torch.no_grad():
        checks.on_forward(synced)  # not a training forward
    checks.on_opt_step()
    checks.finish()
    steps = _recs(checks, schema.K_OPTSTEP)
    assert [(e["n"], e["synced"], e["unsynced"]) for e in steps] == [(1, 1, 2), (2, 1, 2), (3, 0, 0)]
    (summary,) = _recs(checks, schema.K_ACCUM_SUMMARY)
    assert summary["opt_steps"] == 3 and summary["histogram"] == {"1/2": 2, "0/0": 1}


def test_fingerprints_are_equal_for_equal_weights_and_differ_otherwise(checks: Checks) -> None:
    a = torch.nn.Linear(9, 3)
    b = torch.nn.Linear(9, 3)
    b.load_state_dict(a.state_dict())
    checks.fingerprint(a, 1, "after step")
    checks.fingerprint(b, 1, "after step")
    with torch.no_grad():
        b.weight[0, 0] += 1.0
    checks.fingerprint(b, 2, "after step", seq=7)
    fa, fb, fc = _recs(checks, schema.K_FP, name=schema.FINGERPRINTS)
    assert fa["params"] == fb["params"] and set(fa["params"]) == {"weight", "bias"}
    assert fc["params"]["weight"] != fa["params"]["weight"] and fc["params"]["bias"] == fa["params"]["bias"]
    assert (fc["step"], fc["where"], fc["seq"]) == (2, "after step", 7)
    assert fa["params"]["weight"][0] == pytest.approx(float(a.weight.detach().double().sum()))
