"""Healthy. A hand-rolled Lightning-like loop: a LightningModule-shaped model (training_step,
validation_step, configure_optimizers), a Trainer that calls callback hooks (on_train_epoch_start,
on_train_batch_end, on_train_epoch_end, on_validation_epoch_end, on_fit_end), self.log(sync_dist=True)
that all-reduces on every rank, a ModelCheckpoint that saves on global zero and then waits at a barrier,
and an EarlyStopping callback whose decision is reduced across ranks (every rank stops together).

    torchrun --nproc-per-node 2 h06_lightning_hooks.py --max_epochs 3
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Callback:
    def on_fit_start(self, trainer, module): ...
    def on_train_epoch_start(self, trainer, module): ...
    def on_train_batch_end(self, trainer, module, outputs, batch_idx): ...
    def on_train_epoch_end(self, trainer, module): ...
    def on_validation_epoch_end(self, trainer, module): ...
    def on_fit_end(self, trainer, module): ...


class DDPStrategy:
    def __init__(self):
        dist.init_process_group("gloo")
        self.global_rank, self.world_size = dist.get_rank(), dist.get_world_size()

    @property
    def is_global_zero(self):
        return self.global_rank == 0

    def barrier(self, name=None):
        dist.barrier()

    def reduce(self, tensor, op="mean"):
        tensor = tensor.detach().clone()
        dist.all_reduce(tensor)
        return tensor / self.world_size if op == "mean" else tensor

    def reduce_boolean_decision(self, decision, all=True):
        t = torch.tensor(int(decision))
        dist.all_reduce(t)
        return bool(t == self.world_size) if all else bool(t > 0)


class ModelCheckpoint(Callback):
    def __init__(self, dirpath, monitor="val_loss"):
        self.dirpath, self.monitor, self.best = dirpath, monitor, float("inf")

    def on_validation_epoch_end(self, trainer, module):
        current = trainer.callback_metrics[self.monitor]
        if current < self.best:
            self.best = current
            if trainer.is_global_zero:
                os.makedirs(self.dirpath, exist_ok=True)
                torch.save({"state_dict": module.state_dict(), "epoch": trainer.current_epoch},
                           os.path.join(self.dirpath, "best.ckpt"))
            trainer.strategy.barrier("checkpoint")


class EarlyStopping(Callback):
    def __init__(self, monitor="val_loss", patience=2, min_delta=0.0):
        self.monitor, self.patience, self.min_delta = monitor, patience, min_delta
        self.wait, self.best = 0, float("inf")

    def on_validation_epoch_end(self, trainer, module):
        current = trainer.callback_metrics[self.monitor]
        if current < self.best - self.min_delta:
            self.best, self.wait = current, 0
        else:
            self.wait += 1
        should_stop = trainer.strategy.reduce_boolean_decision(self.wait >= self.patience, all=False)
        trainer.should_stop = trainer.should_stop or should_stop


class LearningRateMonitor(Callback):
    def on_train_epoch_end(self, trainer, module):
        if trainer.is_global_zero:
            print(f"epoch {trainer.current_epoch} lr {trainer.optimizers[0].param_groups[0]['lr']:.5f}")


class LitRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
        self.trainer = None

    def forward(self, x):
        return self.net(x)

    def log(self, name, value, sync_dist=False):
        if sync_dist:
            value = self.trainer.strategy.reduce(value)
        self.trainer.callback_metrics[name] = float(value)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.trainer.wrapped(x), y)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y, reduction="sum"), x.shape[0]

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-2)
        return [opt], [torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)]


class Trainer:
    def __init__(self, max_epochs, callbacks, batch_size):
        self.strategy = DDPStrategy()
        self.max_epochs, self.callbacks, self.batch_size = max_epochs, callbacks, batch_size
        self.callback_metrics, self.should_stop, self.current_epoch = {}, False, 0

    @property
    def is_global_zero(self):
        return self.strategy.is_global_zero

    def _call(self, hook, *args):
        for cb in self.callbacks:
            getattr(cb, hook)(self, self.module, *args)

    def fit(self, module, train_set, val_set):
        self.module = module
        module.trainer = self
        self.wrapped = DDP(module)
        self.optimizers, schedulers = module.configure_optimizers()
        train_sampler = DistributedSampler(train_set, shuffle=True, seed=42)
        train_loader = DataLoader(train_set, batch_size=self.batch_size, sampler=train_sampler)
        val_loader = DataLoader(val_set, batch_size=self.batch_size,
                                sampler=DistributedSampler(val_set, shuffle=False))
        self._call("on_fit_start")
        while self.current_epoch < self.max_epochs and not self.should_stop:
            train_sampler.set_epoch(self.current_epoch)
            self._call("on_train_epoch_start")
            module.train()
            for batch_idx, batch in enumerate(train_loader):
                out = module.training_step(batch, batch_idx)
                self.optimizers[0].zero_grad()
                out["loss"].backward()
                self.optimizers[0].step()
                self._call("on_train_batch_end", out, batch_idx)
            for s in schedulers:
                s.step()
            self._call("on_train_epoch_end")
            module.eval()
            total, count = torch.zeros(()), torch.zeros(())
            with torch.no_grad():
                for batch_idx, batch in enumerate(val_loader):
                    s, n = module.validation_step(batch, batch_idx)
                    total += s
                    count += n
            module.log("val_loss", self.strategy.reduce(total, "sum") / self.strategy.reduce(count, "sum"))
            self._call("on_validation_epoch_end")
            self.current_epoch += 1
        self._call("on_fit_end")
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max_epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    w = torch.randn(10, 1)
    x, xv = torch.randn(256, 10), torch.randn(64, 10)
    train_set, val_set = TensorDataset(x, x @ w), TensorDataset(xv, xv @ w)
    trainer = Trainer(args.max_epochs, [ModelCheckpoint("ckpt_h06"), EarlyStopping(patience=2), LearningRateMonitor()],
                      args.batch_size)
    trainer.fit(LitRegressor(), train_set, val_set)


if __name__ == "__main__":
    main()
