"""Probes for ``ddpdoctor check``: what the script does with samplers, seeds, checkpoints and DDP state.

Everything here runs at most once per epoch, per optimizer step, or every ``every`` DDP forwards
(fingerprints); nothing changes what the script computes: samplers yield the same indices, hooks only
read tensors.

Passes. Each iteration of a DistributedSampler (and each DataLoader iterator) is a *pass* with a window:
from its ``__iter__`` until the iterator is freed (the end of the ``for`` loop, or at once for a peek such
as ``next(iter(loader))``). A pass records how many indices it handed out and whether the optimizer
stepped (or a DDP forward with grad ran) inside its window: the analysis counts only passes that trained
as epochs, so a peek or an evaluation loop is not an epoch.

What each rank really iterated. Every DataLoader iterator asks its index sampler for the next batch of
indices through ``_BaseDataLoaderIter._next_index`` (in the main process, with or without workers), so
wrapping it sees the indices of framework-made loaders as well as hand-made ones (Accelerate's
``BatchSamplerShard``, Lightning's DistributedSampler replacement, ``skip_first_batches``). Each pass of an
iterator (a new ``_sampler_iter``) is a *loader pass*: its count, a running digest of every index, the
first ``LOADER_INDEX_CAP`` indices of its first ``INDEX_PASSES`` passes, and the training it fed: an
optimizer step (or DDP forward with grad) is credited to the passes that fetched since the previous
forward, so an evaluation loop that runs in between (no-grad forwards) is not credited. Cost: one
``array`` conversion and a SHA-1 update per batch (about 1-2 us).
"""

from __future__ import annotations

from typing import Any


def install(probe: Any, settings: Any = None) -> Any:
    """Install the check probes (``installer.py``); imported on use so the package stays light."""
    from ddpdoctor.rank.probes.check import installer

    return installer.install(probe, settings)
