"""Lightning with use_distributed_sampler=False and a plain shuffling DataLoader: every rank trains on the whole
data set (planted fault: data.shard-overlap at the DataLoader)."""

import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 8), torch.randn(128, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)  # FAULT
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                        use_distributed_sampler=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Regressor(), loader)


if __name__ == "__main__":
    main()
