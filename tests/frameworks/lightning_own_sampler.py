"""Lightning, healthy: the module builds its own shuffling DistributedSampler in train_dataloader (Lightning keeps
it and calls set_epoch on it every epoch); devices=2 is read by ddpdoctor as the number of ranks."""

import torch
import lightning as L
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.data = TensorDataset(torch.randn(128, 8), torch.randn(128, 1))

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=16, sampler=DistributedSampler(self.data, shuffle=True))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    torch.manual_seed(0)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor())


if __name__ == "__main__":
    main()
