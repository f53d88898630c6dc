"""The issue-37 case: a Hugging Face Trainer subclass over a tiny GPT-2 (built from a config, no download)
keeps every step's loss tensor, with its graph, in ``self.recent_losses`` for a smoothed log line; 400
steps on each rank. ``--healthy`` keeps ``loss.item()`` instead, bounded."""

import os
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

HEALTHY = "--healthy" in sys.argv
STEPS = 400
KEEP = 50


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, length=16, vocab=128):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class SmoothingTrainer(Trainer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.recent_losses = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        loss = out[0] if return_outputs else out
        self.recent_losses.append(loss.item() if HEALTHY else loss)  # LEAK
        if HEALTHY:
            del self.recent_losses[:-KEEP]
        return out


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=STEPS,
            per_device_train_batch_size=4,
            learning_rate=1e-3,
            logging_steps=100,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            ddp_backend="gloo",
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        SmoothingTrainer(
            model=model, args=args, train_dataset=Tokens(STEPS * 8 * int(os.environ.get("WORLD_SIZE", 1)))
        ).train()


if __name__ == "__main__":
    main()
