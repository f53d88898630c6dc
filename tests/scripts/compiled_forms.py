"""A small transformer-like MLP trained with torch.compile in one of the forms users write
(test_compile_transparency.py): each rank prints dynamo's counters at the end, so that a run under ddpdoctor
can be compared with a run under plain torchrun.

    python -m torch.distributed.run --nproc-per-node 2 compiled_forms.py FORMS [--backend B] [--steps N] [--plant]

FORMS: ``all`` or some of, comma-separated, run one after the other (dynamo reset between): ``compile_ddp`` (torch.compile(DDP(model))), ``ddp_compiled`` (DDP(torch.compile(model))),
``ddp_method`` (ddp_model.compile()), ``fsdp2`` (fully_shard blocks, each block compiled), ``collective``
(dist.all_reduce inside a @torch.compile function; dist.broadcast, which dynamo cannot trace, in another). ``--plant``: rank 1 makes one metric all_reduce the
other rank never makes (a hang).
"""

import argparse
import json
import sys

import torch
import torch._dynamo
import torch._dynamo.utils
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d=16, n=2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x).mean()


def build(form, backend):
    net = Net()
    if form == "compile_ddp":
        return torch.compile(DDP(net), backend=backend)
    if form == "ddp_compiled":
        return DDP(torch.compile(net, backend=backend))
    if form == "ddp_method":
        model = DDP(net)
        model.compile(backend=backend)
        return model
    if form == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for i, b in enumerate(net.blocks):
            fully_shard(b)
            net.blocks[i] = torch.compile(b, backend=backend)
        fully_shard(net)
        return net
    if form == "collective":
        return DDP(net)
    raise SystemExit(f"unknown form {form}")


def counters():
    """Dynamo's own account of this rank's compiles: frames converted and compiled, recompiles (a frame's
    cache entries beyond its first: its guards failed), graph breaks, graphs, and the frames that hold
    compiled code (file:function)."""
    from torch._dynamo.convert_frame import input_codes
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters as c

    entries = {}
    for ref in input_codes.seen:
        code = ref()
        n = len(_debug_get_cache_entry_list(code)) if code is not None else 0
        if n:
            key = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"
            entries[key] = entries.get(key, 0) + n
    return {
        "frames_total": c["frames"]["total"],
        "frames_ok": c["frames"]["ok"],
        "recompiles": sum(n - 1 for n in entries.values()),
        "graph_breaks": sum(c["graph_break"].values()),
        "unique_graphs": c["stats"]["unique_graphs"],
        "calls_captured": c["stats"]["calls_captured"],
        "compiled": entries,
    }


FORMS = ("compile_ddp", "ddp_compiled", "ddp_method", "fsdp2", "collective")


def train(form, backend, steps, plant, rank):
    """``steps`` steps of one form; then this rank's counters, and dynamo reset for the next form."""
    torch.manual_seed(0)
    model = build(form, backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @torch.compile(backend=backend)
    def averaged(t):
        dist.all_reduce(t)  # COMPILED_COLLECTIVE
        return t / dist.get_world_size()

    @torch.compile(backend=backend)
    def from_rank0(t):
        dist.broadcast(t, 0)  # no traceable collective of its own: dynamo breaks the graph here
        return t + 1

    metric = torch.zeros(1)
    for step in range(steps):
        x = torch.randn(8, 16)
        loss = model(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if form == "collective":
            metric = from_rank0(averaged(loss.detach().reshape(1)))
        if plant and rank == 1 and step == 3:
            dist.all_reduce(metric)  # PLANTED: only rank 1 makes this call
    dist.barrier()
    sys.stdout.write(f"DYNAMO {json.dumps({'rank': rank, 'form': form, **counters()})}\n")
    sys.stdout.flush()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("forms", help="comma-separated, or all")
    ap.add_argument("--backend", default="eager")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--plant", action="store_true")
    a = ap.parse_args()
    forms = FORMS if a.forms == "all" else a.forms.split(",")
    dist.init_process_group("gloo")
    for form in forms:
        train(form, a.backend, a.steps, a.plant, dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
