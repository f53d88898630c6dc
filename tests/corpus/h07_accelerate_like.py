"""Healthy. An Accelerate-shaped loop written by hand: an Accelerator that prepares model, optimizer and
loaders (DDP + DistributedSampler), backward(), wait_for_everyone(), print() on the main process only,
save() on the main process, and gather_for_metrics(): pad_across_processes + all_gather, then drop the
samples DistributedSampler duplicated to even out the last batch (the validation set has an odd size).

    torchrun --nproc-per-node 2 h07_accelerate_like.py --num_epochs 2
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Accelerator:
    def __init__(self):
        dist.init_process_group("gloo")
        self.process_index, self.num_processes = dist.get_rank(), dist.get_world_size()
        self.is_main_process = self.process_index == 0
        self._seen = {}

    def prepare(self, model, optimizer, *loaders):
        out = [DDP(model), optimizer]
        for dl in loaders:
            shuffle = isinstance(dl.sampler, torch.utils.data.RandomSampler)
            sampler = DistributedSampler(dl.dataset, shuffle=shuffle, seed=0)
            new = DataLoader(dl.dataset, batch_size=dl.batch_size, sampler=sampler)
            self._seen[id(new)] = len(dl.dataset)
            out.append(new)
        return out

    def backward(self, loss):
        loss.backward()

    def print(self, *args):
        if self.is_main_process:
            print(*args)

    def wait_for_everyone(self):
        dist.barrier()

    def unwrap_model(self, model):
        return model.module if isinstance(model, DDP) else model

    def save(self, obj, path):
        if self.is_main_process:
            torch.save(obj, path)

    def pad_across_processes(self, tensor, dim=0):
        size = torch.tensor([tensor.shape[dim]])
        sizes = [torch.zeros_like(size) for _ in range(self.num_processes)]
        dist.all_gather(sizes, size)
        max_size = int(max(s.item() for s in sizes))
        if tensor.shape[dim] == max_size:
            return tensor
        pad = list(tensor.shape)
        pad[dim] = max_size - tensor.shape[dim]
        return torch.cat([tensor, tensor.new_zeros(pad)], dim=dim)

    def gather(self, tensor):
        out = [torch.zeros_like(tensor) for _ in range(self.num_processes)]
        dist.all_gather(out, tensor)
        return torch.cat(out)

    def gather_for_metrics(self, tensor, loader, step, steps):
        gathered = self.gather(self.pad_across_processes(tensor))
        if step == steps - 1:  # last batch: drop what the sampler duplicated
            total = self._seen[id(loader)]
            already = step * loader.batch_size * self.num_processes
            gathered = gathered[: total - already]
        return gathered


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num_epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    accelerator = Accelerator()
    torch.manual_seed(0)
    x = torch.randn(320, 6)
    y = (x.sum(1) > 0).long()
    xv = torch.randn(101, 6)
    yv = (xv.sum(1) > 0).long()
    train_dl = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    eval_dl = DataLoader(TensorDataset(xv, yv), batch_size=args.batch_size, shuffle=False)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
    for epoch in range(args.num_epochs):
        train_dl.sampler.set_epoch(epoch)
        model.train()
        for xb, yb in train_dl:
            loss = nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        correct = seen = 0
        for step, (xb, yb) in enumerate(eval_dl):
            with torch.no_grad():
                preds = model(xb).argmax(dim=-1)
            preds = accelerator.gather_for_metrics(preds, eval_dl, step, len(eval_dl))
            refs = accelerator.gather_for_metrics(yb, eval_dl, step, len(eval_dl))
            correct += (preds == refs).sum().item()
            seen += refs.numel()
        accelerator.print(f"epoch {epoch}: accuracy {correct / seen:.3f} on {seen} samples")
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model_h07.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
