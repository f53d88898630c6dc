"""Where a probe's cost lands inside a step: the comm-heavy step's phases timed with the probes on and off,
in the same rank process, alternating blocks of steps (issue 10).

    ddpdoctor hang --nproc-per-node 1 benchmarks/instep.py     # or check, memleak, profile
    torchrun --standalone --nproc-per-node 1 benchmarks/instep.py       # bare: on and off alike

"Off" sets ddpdoctor's active probe to None (every wrapper then calls straight through), (the
check probe's point after DDP's buffer sync tests it too) and stops the profile's line sampler; the heartbeat thread keeps beating. Prints the median microseconds per
step of each phase with the probes off, and the median over pairs of adjacent blocks of on - off. One rank, gloo, OMP_NUM_THREADS=1 advised (what torchrun sets for 2 ranks).
"""

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

PHASES = ("forward", "backward", "optimizer", "item", "all_reduce")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--keep-sampler", action="store_true", help="profile: leave the line sampler on in both arms")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(32, 256)
    metric = torch.zeros(1)
    active = sys.modules.get("ddpdoctor.rank.active")
    probe = active.probe if active else None
    hooks = dict(model.module._forward_pre_hooks)
    tl = getattr(probe, "timeline", None)
    period = getattr(tl, "period", 0.0)
    pc = time.perf_counter
    acc: dict[bool, list[list[float]]] = {True: [[] for _ in PHASES], False: [[] for _ in PHASES]}

    def block(on: bool, n: int) -> None:
        if active:
            active.probe = probe if on else None
            model.module._forward_pre_hooks.clear()
            if on:
                model.module._forward_pre_hooks.update(hooks)
            if tl is not None:
                tl.period = period if (on or args.keep_sampler) else 0.0
        s = [0.0] * len(PHASES)
        for _ in range(n):
            t0 = pc()
            out = model(x)
            t1 = pc()
            loss = out.pow(2).mean()
            loss.backward()
            t2 = pc()
            opt.step()
            opt.zero_grad()
            t3 = pc()
            metric.fill_(loss.item())
            t4 = pc()
            dist.all_reduce(metric)
            t5 = pc()
            for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                s[i] += d
        for i in range(len(PHASES)):
            acc[on][i].append(1e6 * s[i] / n)

    for _ in range(4):  # warm-up (the memory probe's early censuses, the call-line caches)
        block(True, 100)
    acc = {True: [[] for _ in PHASES], False: [[] for _ in PHASES]}
    for i in range(args.blocks):
        for flag in (True, False) if i % 2 == 0 else (False, True):
            block(flag, args.steps)
    if active:
        active.probe = probe
        if tl is not None:
            tl.period = period
    # the median over pairs of adjacent blocks of (on - off): a machine whose speed drifts moves both alike
    diffs = [[a - b for a, b in zip(acc[True][i], acc[False][i])] for i in range(len(PHASES))]
    tot = [
        sum(acc[True][i][k] for i in range(len(PHASES))) - sum(acc[False][i][k] for i in range(len(PHASES)))
        for k in range(args.blocks)
    ]
    off = [statistics.median(v) for v in acc[False]]
    print(
        "us/step, probes off and (on - off) median over pairs of blocks: "
        + " | ".join(f"{n} {b:.1f} +{statistics.median(d):.1f}" for n, b, d in zip(PHASES, off, diffs))
        + f" | total {sum(off):.1f} +{statistics.median(tot):.1f} ({100 * statistics.median(tot) / sum(off):.1f} %)",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
