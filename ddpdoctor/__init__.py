"""ddpdoctor: run a PyTorch DDP script with probes in every rank and say what is wrong, where.

Importing this package does not import torch.
"""

__version__ = "0.1.0"
