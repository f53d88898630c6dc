"""The main thread's line samples (rank/probes/profile/linesamples.py), taken in-process: the warm-up step
not sampled, each sample counted at the innermost user line in its phase (a wait in a collective counted as
"collective"), written as deltas with the source text once, read back by the analysis as the same line;
past MAX_KEYS lines new ones counted as unknown; the period doubling as samples pile up."""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

import pytest

from ddpdoctor.analysis.profile.steps import samples_of
from ddpdoctor.rank.probes.profile import linesamples
from ddpdoctor.rank.probes.profile.linesamples import LineSamples


class Writer:
    def __init__(self) -> None:
        self.lines: list[dict] = []

    def write(self, kind: str, rank: int, **fields: Any) -> None:
        self.lines.append({"kind": kind, "rank": rank, **fields})


class Sampler(LineSamples):
    def __init__(self, phase: str = "forward", step: int = 2) -> None:
        self.p = types.SimpleNamespace(main_ident=threading.get_ident(), pending=None, rank=0)
        self.w = Writer()
        self.step, self.phase = step, phase
        self.init_samples()


def test_the_warm_up_step_is_not_sampled() -> None:
    s = Sampler(step=0)
    s.sample()
    assert s.n_samples == 0 and s.counts == {}


def test_samples_count_at_this_user_line_and_the_analysis_reads_them_back() -> None:
    s = Sampler()
    for _ in range(3):
        s.sample()  # the sampled line
    line = sys._getframe().f_lineno - 1
    s.phase = "other:forward"
    s.p.pending = {"op": "all_reduce"}
    s.sample()
    s.flush_samples(force=True)
    (rec,) = s.w.lines
    assert rec["kind"] == "samples" and rec["first_step"] == 2
    rows = {(r[0], r[2]): r for r in rec["rows"]}
    fwd = rows[("forward", line)]
    assert fwd[1] == __file__ and fwd[6] == 3 and fwd[7] == "s.sample()  # the sampled line"
    assert rows[("collective", line + 4)][6] == 1
    (hot,) = samples_of(s.w.lines).hot("forward", 30.0)
    assert (hot.file, hot.line, hot.count, hot.ms, hot.text) == (__file__, line, 3, 30.0, "s.sample()")


def test_a_flush_writes_only_the_new_counts_and_the_text_once() -> None:
    s = Sampler()
    for n in (1, 0, 2):
        for _ in range(n):
            s.sample()
        s.flush_samples(force=True)  # the second flush has nothing new: no line
    assert len(s.w.lines) == 2
    assert s.w.lines[0]["rows"][0][6] == 1 and s.w.lines[0]["rows"][0][7] == "s.sample()"
    (row,) = s.w.lines[1]["rows"]
    assert row[6] == 2 and row[7] is None


def test_past_max_keys_new_lines_are_unknown_and_the_period_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linesamples, "MAX_KEYS", 1)
    monkeypatch.setattr(linesamples, "SLOWDOWN_AFTER", 2)
    s = Sampler()
    s.sample()
    s.sample()  # another line, past the one key
    assert (("forward", None, None) in s.counts) and len(s.counts) == 2
    assert s.period == 2 * linesamples.SAMPLE_MS / 1000.0 and s.slowdown_at == 4
