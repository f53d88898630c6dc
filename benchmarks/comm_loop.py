"""A communication-heavy DDP loop (small model, a few ms per step, gloo): prints its own steps/s.

Each step: DDP forward/backward (one gradient all-reduce from C++) plus one Python-level all_reduce of
a metric, so both the DDP counters and the collective wrappers are on the hot path. ``--compile BACKEND``
(``inductor``, ``aot_eager``, ``eager``) runs ``torch.compile(ddp_model, backend=BACKEND)`` instead (issue
51: the compiled steady step under each command against bare); the warm-up steps compile it. Besides the process's
CPU per step (every thread: gloo's too), it prints the training thread's own (``THREAD_MS_PER_STEP``): what the
probes' work on that thread moves, without the noise of the others.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--compile", default="", metavar="BACKEND", help="torch.compile the DDP model with BACKEND")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    if args.compile:
        model = torch.compile(model, backend=args.compile)
    x = torch.randn(32, 256)
    metric = torch.zeros(1)
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
            c0 = time.process_time()
            tc0 = time.thread_time()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        metric.fill_(loss.item())
        dist.all_reduce(metric)
    dist.barrier()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    tcpu = time.thread_time() - tc0
    print(
        f"RANK {dist.get_rank()} STEPS_PER_S {args.steps / dt:.2f} STEP_MS {1000 * dt / args.steps:.3f} "
        f"CPU_MS_PER_STEP {1000 * cpu / args.steps:.3f} THREAD_MS_PER_STEP {1000 * tcpu / args.steps:.4f}",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
