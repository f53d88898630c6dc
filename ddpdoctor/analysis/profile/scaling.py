"""Scaling efficiency of one script over several world sizes (``profile --scaling 1,2,4``). Pure.

Throughput is samples per second: every rank's samples per optimizer step (the leading size of each
``DDP.forward``'s first tensor, micro-batches of gradient accumulation summed), summed over the ranks, over
the typical steady step. Efficiency is the throughput against the smallest run's scaled by the ratio of
world sizes ("2 ranks: 1.71x of 2x (86 %)").

With the same samples per rank in every arm (weak scaling, DDP's usual set-up), a perfectly scaling job keeps
its step time; the step time beyond the smallest run's (scaled by the per-rank samples) is the lost part,
split into what the records show: communication the backward did not hide (DDP's timers: the gradient
all-reduce after the backward compute ended, less the wait below), waiting for a slower rank (the mean
difference to the slowest rank's backward compute), data wait (the DataLoader phase), and the rest
(compute that slowed down: shared cores, memory bandwidth, Python).
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.analysis.profile.trials import RunFigures

LOST_PARTS = ("exposed communication", "waiting for a slower rank", "data wait", "rest")


@dataclass(frozen=True)
class ScalePoint:
    """One world size against the smallest."""

    world_size: int
    step_ms: float
    spread_ms: float
    samples_per_step: float  # every rank's, per optimizer step (or ranks x steps where samples are unknown)
    throughput: float  # samples (or steps x ranks) per second
    speedup: float  # throughput / the smallest run's
    ideal: float  # world size / the smallest world size
    lost_ms: float  # step time beyond the ideal
    lost: dict[str, float]  # LOST_PARTS -> ms per step

    @property
    def efficiency(self) -> float:
        return self.speedup / self.ideal if self.ideal else 0.0

    def line(self) -> str:
        """``2 ranks: 1.71x of 2x (86 %)``."""
        return (
            f"{self.world_size} rank{'s' if self.world_size != 1 else ''}: {self.speedup:.2f}x of "
            f"{self.ideal:g}x ({100 * self.efficiency:.0f} %)"
        )


def _parts(f: RunFigures) -> tuple[float, float, float]:
    exposed = f.exposed_ms or 0.0
    wait = min(f.wait_ms or 0.0, exposed)
    return exposed - wait, wait, f.parts.get("data", 0.0)


def scaling(arms: list[RunFigures]) -> tuple[list[ScalePoint], bool]:
    """Each arm against the smallest world size's, in order of world size; and whether samples were counted
    (False: every arm lacks a sample count, so throughput is steps x ranks per second)."""
    arms = sorted(arms, key=lambda f: f.world_size)
    if not arms:
        return [], False
    counted = all(f.samples_per_step for f in arms)
    base = arms[0]
    out = []

    def per_step(f: RunFigures) -> float:
        return float(f.samples_per_step) if counted and f.samples_per_step else float(f.world_size)

    thr0 = per_step(base) / base.step_ms * 1000.0
    b_comm, b_wait, b_data = _parts(base)
    for f in arms:
        thr = per_step(f) / f.step_ms * 1000.0
        # the step this arm would take at the smallest run's pace per sample of one rank
        per_rank = per_step(f) / f.world_size
        per_rank0 = per_step(base) / base.world_size
        ideal_step = base.step_ms * (per_rank / per_rank0 if per_rank0 else 1.0)
        lost_ms = max(0.0, f.step_ms - ideal_step)
        comm, wait, data = _parts(f)
        shown = {
            LOST_PARTS[0]: max(0.0, comm - b_comm),
            LOST_PARTS[1]: max(0.0, wait - b_wait),
            LOST_PARTS[2]: max(0.0, data - b_data),
        }
        # parts larger than the loss (noise between the arms) are cut back in order, the rest is what is left
        left = lost_ms
        for k in LOST_PARTS[:3]:
            shown[k] = min(shown[k], left)
            left -= shown[k]
        shown[LOST_PARTS[3]] = left
        out.append(
            ScalePoint(
                f.world_size,
                f.step_ms,
                f.spread_ms,
                per_step(f),
                thr,
                thr / thr0 if thr0 else 0.0,
                f.world_size / base.world_size,
                lost_ms,
                shown,
            )
        )
    return out, counted


def machine_bound(world_sizes: list[int], threads: int, cores: int, gpus: int) -> str | None:
    """The line that says a figure is bounded by the machine: more ranks x threads than cores (CPU jobs),
    or more ranks than GPUs (GPU jobs: ``gpus`` > 0)."""
    top = max(world_sizes, default=0)
    if gpus and top > gpus:
        return f"this machine has {gpus} GPU{'s' if gpus != 1 else ''} for up to {top} ranks: ranks share GPUs, the figures above {gpus} ranks are bounded by the machine"
    if not gpus and top * threads > cores:
        return (
            f"this machine has {cores} CPU core{'s' if cores != 1 else ''} for up to {top} ranks x {threads} "
            f"thread{'s' if threads != 1 else ''}: ranks share cores, so the efficiency is bounded by the machine, "
            "not only by the job"
        )
    return None
