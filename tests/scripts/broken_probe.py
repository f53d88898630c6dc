"""A healthy DDP loop that breaks one of ddpdoctor's own probes inside its rank on purpose (``--break
memleak|profile|check``), as a probe bug would: the report must say which probe failed and what data it
misses (probe.internal-error), never look clean with a hole in it. Outside ddpdoctor it only trains."""

import argparse
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def broken(*_args, **_kwargs):
    raise RuntimeError("broken on purpose by the test")


def break_probe(which):
    if which == "memleak" and "ddpdoctor.rank.probes.memleak.census" in sys.modules:
        sys.modules["ddpdoctor.rank.probes.memleak.census"].census = broken  # every census fails
    if which == "profile" and "ddpdoctor.rank.probes.profile.timeline" in sys.modules:
        sys.modules["ddpdoctor.rank.probes.profile.timeline"].Timeline.drain = broken  # its on_tick fails
    if which == "check" and "ddpdoctor.rank.probes.check.state" in sys.modules:
        sys.modules["ddpdoctor.rank.probes.check.state"].Checks.on_opt_step = broken  # its optimizer hook fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--break", dest="which", required=True)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    break_probe(args.which)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
