"""A trainer in the callback style: after each batch, a hook keeps the batch's logits for an epoch-end
metric, on rank 0 only, and forgets to detach them (so each step's graph stays alive). Fast steps."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class MiniTrainer:
    def __init__(self, model, opt, rank, detach):
        self.model, self.opt, self.rank, self.detach = model, opt, rank, detach
        self._epoch_logits = []

    def training_step(self, batch):
        x, y = batch
        logits = self.model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        return {"loss": loss, "logits": logits}

    def on_train_batch_end(self, outputs, batch_idx):
        if self.rank == 0:
            kept = outputs["logits"].detach() if self.detach else outputs["logits"]
            self._epoch_logits.append(kept)  # LEAK

    def fit(self, steps):
        for i in range(steps):
            batch = (torch.randn(8, 16), torch.randint(0, 4, (8,)))
            out = self.training_step(batch)
            self.opt.zero_grad()
            out["loss"].backward()
            self.opt.step()
            self.on_train_batch_end(out, i)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--detach", action="store_true", help="keep detached logits (the healthy variant)")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    MiniTrainer(model, torch.optim.SGD(model.parameters(), lr=0.01), dist.get_rank(), args.detach).fit(args.steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
