"""Healthy. examples/imagenet/main.py style: AverageMeter with an all_reduce() method, ProgressMeter,
train()/validate() functions, a validation sampler with drop_last=True plus an auxiliary loader that
every rank runs over the remainder, best-accuracy checkpoint copied with shutil on rank 0, StepLR.

    torchrun --nproc-per-node 2 h15_imagenet_style.py --epochs 2 -b 16
"""

import argparse
import os
import shutil
import time
from enum import Enum

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Summary(Enum):
    NONE, AVERAGE, SUM, COUNT = range(4)


class AverageMeter:
    def __init__(self, name, fmt=":f", summary_type=Summary.AVERAGE):
        self.name, self.fmt, self.summary_type = name, fmt, summary_type
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def all_reduce(self):
        total = torch.tensor([self.sum, self.count], dtype=torch.float32)
        dist.all_reduce(total, dist.ReduceOp.SUM, async_op=False)
        self.sum, self.count = total.tolist()
        self.avg = self.sum / self.count

    def __str__(self):
        return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(**self.__dict__)


class ProgressMeter:
    def __init__(self, num_batches, meters, prefix=""):
        self.num_batches, self.meters, self.prefix = num_batches, meters, prefix

    def display(self, batch):
        print("\t".join([f"{self.prefix}[{batch}/{self.num_batches}]"] + [str(m) for m in self.meters]))


def accuracy(output, target):
    with torch.no_grad():
        return (output.argmax(1) == target).float().mean().mul_(100.0)


def train(loader, model, criterion, optimizer, epoch, args):
    batch_time, losses, top1 = AverageMeter("Time", ":6.3f"), AverageMeter("Loss", ":.4e"), AverageMeter("Acc@1", ":6.2f")
    progress = ProgressMeter(len(loader), [batch_time, losses, top1], prefix=f"Epoch: [{epoch}]")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(loader):
        output = model(images)
        loss = criterion(output, target)
        losses.update(loss.item(), images.size(0))
        top1.update(accuracy(output, target).item(), images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch_time.update(time.time() - end)
        end = time.time()
        if i % args.print_freq == 0 and args.rank == 0:
            progress.display(i + 1)


def validate(val_loader, model, criterion, args):
    def run_validate(loader, base_progress=0):
        with torch.no_grad():
            for i, (images, target) in enumerate(loader):
                i = base_progress + i
                output = model(images)
                losses.update(criterion(output, target).item(), images.size(0))
                top1.update(accuracy(output, target).item(), images.size(0))

    losses, top1 = AverageMeter("Loss", ":.4e", Summary.NONE), AverageMeter("Acc@1", ":6.2f", Summary.AVERAGE)
    model.eval()
    run_validate(val_loader)
    top1.all_reduce()
    losses.all_reduce()
    if len(val_loader.sampler) * args.world_size < len(val_loader.dataset):
        aux = Subset(val_loader.dataset, range(len(val_loader.sampler) * args.world_size, len(val_loader.dataset)))
        run_validate(DataLoader(aux, batch_size=args.batch_size, shuffle=False), len(val_loader))
    if args.rank == 0:
        print(f" * Acc@1 {top1.avg:.3f}")
    return top1.avg


def save_checkpoint(state, is_best, filename="checkpoint_h15.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best_h15.pth.tar")


def main():
    p = argparse.ArgumentParser(description="ImageNet-style training (corpus)")
    p.add_argument("--epochs", default=2, type=int)
    p.add_argument("-b", "--batch-size", default=16, type=int)
    p.add_argument("--lr", default=0.05, type=float)
    p.add_argument("-p", "--print-freq", default=4, type=int)
    args = p.parse_args()
    dist.init_process_group(backend="gloo", init_method="env://")
    args.rank, args.world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 10))
    model = torch.nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)
    g = torch.Generator().manual_seed(5)
    train_dataset = TensorDataset(torch.randn(192, 3, 8, 8, generator=g), torch.randint(0, 10, (192,), generator=g))
    val_dataset = TensorDataset(torch.randn(75, 3, 8, 8, generator=g), torch.randint(0, 10, (75,), generator=g))
    train_sampler = DistributedSampler(train_dataset)
    val_sampler = DistributedSampler(val_dataset, shuffle=False, drop_last=True)
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=(train_sampler is None),
                              sampler=train_sampler)
    val_loader = DataLoader(val_dataset, batch_size=args.batch_size, shuffle=False, sampler=val_sampler)
    best_acc1 = 0
    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)
        train(train_loader, model, criterion, optimizer, epoch, args)
        acc1 = validate(val_loader, model, criterion, args)
        scheduler.step()
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        if args.rank % max(1, int(os.environ.get("LOCAL_WORLD_SIZE", 1))) == 0:
            save_checkpoint({"epoch": epoch + 1, "state_dict": model.state_dict(), "best_acc1": best_acc1,
                             "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, is_best)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
