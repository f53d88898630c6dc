"""``ddpdoctor compare BASE.json NEW.json``: gate a change on step time and memory growth.

Reads the ``figures`` of two JSON reports (``ddpdoctor profile --json``: per-rank steady-state step and
phases (the typical steady step); ``ddpdoctor memleak --json``: per-rank memory growth per step) and prints a table per rank
and phase. A regression: a rank's step time grew by more than ``--max-step-time-regression`` percent, or
its RSS / CUDA growth per step rose by more than ``--max-memory-slope-regression`` bytes. Stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.findings import rank_list
from ddpdoctor.errors import DdpdoctorError, ExitCode
from ddpdoctor.units import size  # one way to write a size: the report's and this table's agree

PHASES = ("step", "data", "forward", "backward+comm", "optimizer", "collective", "other")


@dataclass
class Comparison:
    lines: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return ExitCode.FINDINGS if self.regressions else ExitCode.OK


def load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise DdpdoctorError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise DdpdoctorError(f"{path} is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("schema") != "ddpdoctor.report":
        raise DdpdoctorError(
            f"{path} is not a ddpdoctor JSON report (write one with `ddpdoctor profile --json FILE` "
            "or `ddpdoctor memleak --json FILE`)"
        )
    figs = data.get("figures")
    if not isinstance(figs, dict) or not (figs.get("step_ms") or figs.get("memory")):
        raise DdpdoctorError(
            f"{path} has no figures to compare (a `{data.get('command', '?')}` report; step times "
            "come from `ddpdoctor profile`, memory growth from `ddpdoctor memleak`, with this "
            "version's --json)"
        )
    return data


def parse_bytes(text: str) -> float:
    t = text.strip().upper().removesuffix("B")
    t = t[:-1] if t[-2:-1] in ("K", "M", "G") and t.endswith("I") else t  # 64KiB: as units.size writes it
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    num = t[:-1] if mult > 1 else t
    try:
        v = float(num) * mult
    except ValueError:
        raise DdpdoctorError(f"--max-memory-slope-regression: bad size {text!r} (e.g. 64K, 1M)") from None
    if v < 0:
        raise DdpdoctorError("--max-memory-slope-regression must not be negative")
    return v


def _pct(base: float, new: float) -> float | None:
    return (new - base) / base * 100 if base > 0 else None


def step_table(base: dict[str, Any], new: dict[str, Any], max_pct: float, out: Comparison) -> None:
    common = sorted(set(base) & set(new), key=int)
    out.lines.append(
        f"ddpdoctor compare: step time, typical steady-state ms per step (regression: step > +{max_pct:g}%)"
    )
    out.lines.append(f"  {'rank':>5}  {'phase':14s}{'base ms':>10}{'new ms':>10}{'change':>10}")
    for r in common:
        b, n = base[r], new[r]
        phases = [p for p in PHASES if p in b and p in n and (p == "step" or b[p] > 0 or n[p] > 0)]
        grew = max((p for p in phases if p != "step"), key=lambda p: n[p] - b[p], default=None)
        for p in phases:
            pct = _pct(float(b[p]), float(n[p]))
            change = f"{pct:+.1f}%" if pct is not None else "new"
            mark = ""
            if p == "step" and pct is not None and pct > max_pct:
                mark = f"  REGRESSION (> +{max_pct:g}%)"
                out.regressions.append(f"rank {r} step {b[p]:.1f} -> {n[p]:.1f} ms ({change})")
            elif p == grew and n[p] - b[p] > 0 and float(n["step"]) > float(b["step"]) * (1 + max_pct / 100):
                mark = "  <- most of the growth"
            out.lines.append(f"  {r:>5}  {p:14s}{float(b[p]):>10.2f}{float(n[p]):>10.2f}{change:>10}{mark}")
    only = sorted(set(base) ^ set(new), key=int)
    if only:
        out.lines.append(f"  ranks in one report only (not compared): {rank_list(map(int, only))}")


def memory_table(base: dict[str, Any], new: dict[str, Any], max_slope: float, out: Comparison) -> None:
    common = sorted(set(base) & set(new), key=int)
    out.lines.append(
        f"ddpdoctor compare: memory growth per step after warm-up (regression: growth rises by more "
        f"than {size(max_slope)}/step)"
    )
    out.lines.append(f"  {'rank':>5}  {'memory':8s}{'base/step':>14}{'new/step':>14}{'change':>14}")
    for r in common:
        for layer in ("rss", "cuda"):
            key = f"{layer}_bytes_per_step"
            if key not in base[r] or key not in new[r]:
                continue
            b, n = float(base[r][key]), float(new[r][key])
            mark = ""
            if n - b > max_slope:
                mark = f"  REGRESSION (> +{size(max_slope)}/step)"
                out.regressions.append(f"rank {r} {layer} growth {size(b)} -> {size(n)} per step")
            change = ("+" if n >= b else "") + size(n - b)
            out.lines.append(f"  {r:>5}  {layer:8s}{size(b):>14}{size(n):>14}{change:>14}{mark}")
    only = sorted(set(base) ^ set(new), key=int)
    if only:
        out.lines.append(f"  ranks in one report only (not compared): {rank_list(map(int, only))}")


def compare(base_path: str, new_path: str, max_step_pct: float | None, max_slope: float | None) -> Comparison:
    base, new = load(base_path), load(new_path)
    bf, nf = base["figures"], new["figures"]
    out = Comparison()
    did = False
    if bf.get("step_ms") and nf.get("step_ms"):
        step_table(bf["step_ms"], nf["step_ms"], 10.0 if max_step_pct is None else max_step_pct, out)
        did = True
    elif max_step_pct is not None:
        raise DdpdoctorError(
            "--max-step-time-regression: both reports need step times (from `ddpdoctor profile --json`)"
        )
    if bf.get("memory") and nf.get("memory"):
        memory_table(bf["memory"], nf["memory"], 64 * 1024.0 if max_slope is None else max_slope, out)
        did = True
    elif max_slope is not None:
        raise DdpdoctorError(
            "--max-memory-slope-regression: both reports need memory figures (from `ddpdoctor memleak --json`)"
        )
    if not did:
        raise DdpdoctorError(
            f"nothing to compare: {base_path} has {', '.join(bf) or 'no figures'}, {new_path} has "
            f"{', '.join(nf) or 'no figures'}"
        )
    if out.regressions:
        shown = "; ".join(out.regressions[:4]) + (
            f"; {len(out.regressions) - 4} more" if len(out.regressions) > 4 else ""
        )
        out.lines.append(f"ddpdoctor compare: REGRESSION (exit code 1): {shown}")
    else:
        out.lines.append("ddpdoctor compare: OK (exit code 0): no regression")
    return out
