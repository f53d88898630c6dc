"""Healthy. torchvision references' classification style: init_distributed_mode from the environment,
print silenced on non-master ranks, MetricLogger/SmoothedValue with synchronize_between_processes,
save_on_master, reduce_dict, evaluation on every rank with an unshuffled DistributedSampler.

    torchrun --nproc-per-node 2 h04_torchvision_ref.py --epochs 2 --batch-size 16
"""

import argparse
import builtins
import datetime
import os
import time
from collections import defaultdict, deque

import torch
import torch.distributed as dist
import torch.nn as nn


# ---- utils.py -----------------------------------------------------------------------------------
class SmoothedValue:
    def __init__(self, window_size=20, fmt="{median:.4f} ({global_avg:.4f})"):
        self.deque = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0
        self.fmt = fmt

    def update(self, value, n=1):
        self.deque.append(value)
        self.count += n
        self.total += value * n

    def synchronize_between_processes(self):
        if not is_dist_avail_and_initialized():
            return
        t = torch.tensor([self.count, self.total], dtype=torch.float64)
        dist.barrier()
        dist.all_reduce(t)
        self.count = int(t[0].item())
        self.total = t[1].item()

    @property
    def median(self):
        return torch.tensor(list(self.deque)).median().item()

    @property
    def global_avg(self):
        return self.total / max(self.count, 1)

    def __str__(self):
        return self.fmt.format(median=self.median, global_avg=self.global_avg)


class MetricLogger:
    def __init__(self, delimiter="  "):
        self.meters = defaultdict(SmoothedValue)
        self.delimiter = delimiter

    def update(self, **kwargs):
        for k, v in kwargs.items():
            self.meters[k].update(v.item() if isinstance(v, torch.Tensor) else v)

    def synchronize_between_processes(self):
        for meter in self.meters.values():
            meter.synchronize_between_processes()

    def log_every(self, iterable, print_freq, header=""):
        start = time.time()
        for i, obj in enumerate(iterable):
            yield obj
            if i % print_freq == 0 or i == len(iterable) - 1:
                msg = self.delimiter.join(f"{k}: {v}" for k, v in self.meters.items())
                print(f"{header} [{i}/{len(iterable)}] {msg}")
        print(f"{header} total time: {datetime.timedelta(seconds=int(time.time() - start))}")


def setup_for_distributed(is_master):
    builtin_print = builtins.print

    def print(*args, **kwargs):
        force = kwargs.pop("force", False)
        if is_master or force:
            builtin_print(*args, **kwargs)

    builtins.print = print


def is_dist_avail_and_initialized():
    return dist.is_available() and dist.is_initialized()


def get_rank():
    return dist.get_rank() if is_dist_avail_and_initialized() else 0


def is_main_process():
    return get_rank() == 0


def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)


def reduce_dict(input_dict, average=True):
    world_size = dist.get_world_size()
    with torch.no_grad():
        names = sorted(input_dict.keys())
        values = torch.stack([input_dict[k] for k in names])
        dist.all_reduce(values)
        if average:
            values /= world_size
        return dict(zip(names, values))


def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    else:
        print("Not using distributed mode")
        args.distributed = False
        return
    args.distributed = True
    args.dist_backend = "gloo"
    print(f"| distributed init (rank {args.rank}): {args.dist_url}", flush=True)
    dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    dist.barrier()
    setup_for_distributed(args.rank == 0)


# ---- train.py -----------------------------------------------------------------------------------
def make_model(num_classes=4):
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(32, num_classes))


def train_one_epoch(model, criterion, optimizer, data_loader, epoch, print_freq):
    model.train()
    metric_logger = MetricLogger()
    for image, target in metric_logger.log_every(data_loader, print_freq, f"Epoch: [{epoch}]"):
        output = model(image)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        acc1 = (output.argmax(1) == target).float().mean() * 100
        metric_logger.update(loss=loss.item(), lr=optimizer.param_groups[0]["lr"])
        metric_logger.meters["acc1"].update(acc1.item(), n=image.shape[0])
    losses = reduce_dict({"loss": torch.tensor(metric_logger.meters["loss"].global_avg)})
    print(f"epoch {epoch} reduced loss {losses['loss'].item():.4f}")


def evaluate(model, criterion, data_loader, print_freq=100):
    model.eval()
    metric_logger = MetricLogger()
    with torch.inference_mode():
        for image, target in metric_logger.log_every(data_loader, print_freq, "Test:"):
            output = model(image)
            loss = criterion(output, target)
            acc1 = (output.argmax(1) == target).float().mean() * 100
            metric_logger.update(loss=loss.item())
            metric_logger.meters["acc1"].update(acc1.item(), n=image.shape[0])
    metric_logger.synchronize_between_processes()
    print(f"Test: Acc@1 {metric_logger.meters['acc1'].global_avg:.3f}")
    return metric_logger.meters["acc1"].global_avg


def synthetic(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0).long() + 2 * (x[:, 0, 0, 0] > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def main(args):
    init_distributed_mode(args)
    torch.manual_seed(args.seed)
    dataset, dataset_test = synthetic(256, 0), synthetic(96, 1)
    train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    test_sampler = torch.utils.data.distributed.DistributedSampler(dataset_test, shuffle=False)
    data_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler)
    data_loader_test = torch.utils.data.DataLoader(dataset_test, batch_size=args.batch_size, sampler=test_sampler)
    model = make_model()
    model_without_ddp = model
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
        model_without_ddp = model.module
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    os.makedirs(args.output_dir, exist_ok=True)
    for epoch in range(args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        train_one_epoch(model, criterion, optimizer, data_loader, epoch, args.print_freq)
        lr_scheduler.step()
        evaluate(model, criterion, data_loader_test)
        checkpoint = {"model": model_without_ddp.state_dict(), "optimizer": optimizer.state_dict(),
                      "lr_scheduler": lr_scheduler.state_dict(), "epoch": epoch, "args": vars(args)}
        save_on_master(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
        save_on_master(checkpoint, os.path.join(args.output_dir, "checkpoint.pth"))
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="classification training (corpus)")
    p.add_argument("--epochs", default=2, type=int)
    p.add_argument("-b", "--batch-size", default=16, type=int)
    p.add_argument("--lr", default=0.1, type=float)
    p.add_argument("--print-freq", default=5, type=int)
    p.add_argument("--output-dir", default="out_h04")
    p.add_argument("--seed", default=0, type=int)
    p.add_argument("--dist-url", default="env://")
    main(p.parse_args())
