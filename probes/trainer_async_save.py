"""Fault probe: a Trainer class in the style of the DDP tutorial whose checkpoint branch, taken on rank 0
only, starts an asynchronous all_reduce (a "saved" counter) and waits on it a few batches later. Rank 1
never issues it, so the ranks' collective sequences part there; gloo matches the all_reduce against
rank 1's DDP bucket all-reduce and aborts.

Expected finding: hang.rank-conditional-collective, culprit rank 0 at EXTRA.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, loader, optimizer, save_every):
        self.rank = dist.get_rank()
        self.model = DDP(model)
        self.loader = loader
        self.optimizer = optimizer
        self.save_every = save_every
        self.pending = None
        self.batches_since_save = 0

    def _run_batch(self, x, y):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        if self.pending is not None:
            self.batches_since_save += 1
            if self.batches_since_save > 2:
                self.pending.wait()
                self.pending = None

    def _save(self, epoch):
        state = {"model": self.model.module.state_dict(), "epoch": epoch}
        self.pending = dist.all_reduce(torch.ones(1), async_op=True)  # EXTRA
        self.batches_since_save = 0
        return state

    def train(self, epochs):
        for epoch in range(epochs):
            self.loader.sampler.set_epoch(epoch)
            for x, y in self.loader:
                self._run_batch(x, y)
            if self.rank == 0 and epoch % self.save_every == 0:
                self._save(epoch)


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 10), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
    model = torch.nn.Linear(10, 1)
    Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.01), save_every=1).train(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
