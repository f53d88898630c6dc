"""Lightning with a leak in a callback: the module keeps the last batch's logits for callbacks to see, and a
callback collects them for an epoch-end statistic on rank 0 only, forgetting to detach them. Only the
Trainer's list of callbacks refers to the callback, so no frame of the user's code names what grows."""

import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        self.last_logits = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.last_logits = self.net(x)
        return torch.nn.functional.cross_entropy(self.last_logits, y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class EpochLogits(L.Callback):
    def __init__(self):
        self._epoch_logits = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_rank == 0:
            self._epoch_logits.append(pl_module.last_logits)  # FAULT: kept with its graph, rank 0 only

    def on_train_epoch_end(self, trainer, pl_module):
        if self._epoch_logits and trainer.global_rank == 0:
            print("mean logit", float(torch.cat([t.detach() for t in self._epoch_logits]).mean()))


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 8), torch.randint(0, 3, (512,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[EpochLogits()])
    trainer.fit(Classifier(), loader)


if __name__ == "__main__":
    main()
