"""One NCCL rank per GPU: DDP steps, a synchronous and an asynchronous metric all_reduce per step, the
async one waited at the end of the step. Run as a healthy script (NCCL refuses two ranks on one GPU)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    model = DDP(torch.nn.Linear(64, 8).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(40):
        loss = model(torch.randn(32, 64, device=dev)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        m = torch.stack([loss.detach(), torch.ones((), device=dev)])
        dist.all_reduce(m)  # SYNC: NCCL returns once it is enqueued
        w = dist.all_reduce(m.clone(), async_op=True)
        w.wait()
        if step % 10 == 0:
            print(f"step {step} loss {m[0].item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
