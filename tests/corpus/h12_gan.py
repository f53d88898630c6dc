"""Healthy. A small GAN with two DDP models (generator and discriminator) and two optimizers: the
discriminator sees real and detached fake samples in one forward, then the generator step back-propagates
through the discriminator (its gradients are all-reduced too and zeroed before its next step).

    torchrun --nproc-per-node 2 h12_gan.py --epochs 2
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

NZ = 8


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    real_data = TensorDataset(torch.randn(256, 2) * torch.tensor([0.5, 2.0]) + 1.0)
    sampler = DistributedSampler(real_data)
    loader = DataLoader(real_data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    netG = DDP(nn.Sequential(nn.Linear(NZ, 32), nn.ReLU(), nn.Linear(32, 2)))
    netD = DDP(nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1)))
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    criterion = nn.BCEWithLogitsLoss()
    torch.manual_seed(1000 + rank)  # different noise on every rank (after DDP's broadcast)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for i, (real,) in enumerate(loader):
            b = real.shape[0]
            noise = torch.randn(b, NZ)
            fake = netG(noise)
            # (1) update D: maximise log(D(x)) + log(1 - D(G(z)))
            optD.zero_grad()
            logits = netD(torch.cat([real, fake.detach()]))
            labels = torch.cat([torch.ones(b, 1), torch.zeros(b, 1)])
            errD = criterion(logits, labels)
            errD.backward()
            optD.step()
            # (2) update G: maximise log(D(G(z)))
            optG.zero_grad()
            errG = criterion(netD(fake), torch.ones(b, 1))
            errG.backward()
            optG.step()
            if rank == 0 and i % 4 == 0:
                print(f"[{epoch}][{i}/{len(loader)}] Loss_D {errD.item():.4f} Loss_G {errG.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
