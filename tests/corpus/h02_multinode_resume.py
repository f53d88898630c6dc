"""Healthy. The tutorial's multinode trainer (global rank from RANK, local rank from LOCAL_RANK) with a
snapshot that also holds the optimizer; the job is "restarted" once in-process: a second Trainer picks
up the snapshot the first one left, the way torchrun --max-restarts would after a failure.

    torchrun --nproc-per-node 2 h02_multinode_resume.py 4 1 --batch_size 16
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, build, train_data, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        model, self.optimizer = build()
        self.train_data = train_data
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            snap = torch.load(snapshot_path, map_location="cpu")
            model.load_state_dict(snap["MODEL_STATE"])
            self.optimizer.load_state_dict(snap["OPTIM_STATE"])
            self.epochs_run = snap["EPOCHS_RUN"]
            print(f"[global rank {self.global_rank}] resuming at epoch {self.epochs_run}")
        self.model = DDP(model)

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        running = 0.0
        for source, targets in self.train_data:
            self.optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(source), targets)
            loss.backward()
            self.optimizer.step()
            running += loss.item()
        print(f"[global rank {self.global_rank}] epoch {epoch} loss {running / len(self.train_data):.3f}")

    def _save_snapshot(self, epoch):
        torch.save({"MODEL_STATE": self.model.module.state_dict(), "OPTIM_STATE": self.optimizer.state_dict(),
                    "EPOCHS_RUN": epoch + 1}, self.snapshot_path)

    def train(self, stop_epoch):
        for epoch in range(self.epochs_run, stop_epoch):
            self._run_epoch(epoch)
            if self.local_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def build():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
    return model, torch.optim.Adam(model.parameters(), lr=3e-3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--snapshot_path", default="snapshot_h02.pt")
    args = p.parse_args()
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(192, 12, generator=g)
    data = TensorDataset(x, (x[:, :3].argmax(dim=1)))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data, shuffle=True))
    # first attempt stops half-way (as if the job was pre-empted) ...
    Trainer(build, loader, args.save_every, args.snapshot_path).train(args.total_epochs // 2)
    dist.barrier()
    # ... the restarted attempt resumes from the snapshot
    Trainer(build, loader, args.save_every, args.snapshot_path).train(args.total_epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
