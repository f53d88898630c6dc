"""Fault probe: uneven batches. The data is split by hand (no DistributedSampler), so rank 0 gets
one batch more than rank 1; rank 1 finishes its epoch and all-reduces its epoch loss while rank 0 is
still in the backward of its extra step.

Expected finding: hang.uneven-batches, ranks 0 and 1 (rank 0 at BACKWARD, rank 1 at EPOCH_END).
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(36, 8), torch.randn(36, 1))
    # a hand-made split: the first rank takes the remainder
    per = len(data) // world
    start = 0 if rank == 0 else per + 4 + (rank - 1) * (per - 4)
    stop = per + 4 if rank == 0 else start + per - 4
    loader = DataLoader(Subset(data, range(start, stop)), batch_size=4)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = torch.zeros(1)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # BACKWARD
        opt.step()
        opt.zero_grad()
        total += loss.detach()
    dist.all_reduce(total)  # EPOCH_END
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
