"""Lightning, written as its docs show; the epoch-end hook gathers on global rank zero only (planted fault)."""

import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def on_train_epoch_end(self):
        if self.trainer.is_global_zero:
            gathered = self.all_gather(torch.ones(2))  # FAULT
            print("gathered", gathered.shape)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), loader)


if __name__ == "__main__":
    main()
