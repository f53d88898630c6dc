"""A Hugging Face Trainer subclass whose compute_loss keeps the last losses for a smoothed log line, but
keeps the tensors themselves (each with its graph), on every rank. A tiny model, no downloads."""

import os
import sys
import tempfile

import torch
from transformers import Trainer, TrainingArguments


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def forward(self, x, y=None):
        return self.net(x)


class Points(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)
        self.y = self.x.sum(1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


HEALTHY = "--healthy" in sys.argv  # the variant that keeps floats, bounded
KEEP = 20


class SmoothingTrainer(Trainer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.recent_losses = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        pred = model(inputs["x"])
        loss = torch.nn.functional.mse_loss(pred, inputs["y"])
        self.recent_losses.append(loss.item() if HEALTHY else loss)  # LEAK
        if HEALTHY:
            del self.recent_losses[:-KEEP]
        return (loss, pred) if return_outputs else loss


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 300
    out = tempfile.mkdtemp(prefix="hf-out-")
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=8,
        max_steps=steps,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        remove_unused_columns=False,
        ddp_backend="gloo",
    )
    SmoothingTrainer(model=Regressor(), args=args, train_dataset=Points(4096)).train()
    if os.environ.get("RANK", "0") == "0":
        print("done")


if __name__ == "__main__":
    main()
