"""Lightning with a planted leak: the module keeps every training loss, graph and all, in a list (a
hand-made running history next to self.log)."""

import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.history = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        self.history.append(loss)  # FAULT: the loss keeps its autograd graph alive
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def on_train_epoch_end(self):
        gathered = self.all_gather(torch.ones(2))
        if self.trainer.is_global_zero:
            print("gathered", tuple(gathered.shape))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    trainer = L.Trainer(max_epochs=10, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    val = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
    trainer.fit(Regressor(), loader, val)


if __name__ == "__main__":
    main()
