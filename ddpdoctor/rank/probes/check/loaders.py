"""Wrappers of DistributedSampler and DataLoader: where each is built, set_epoch, and what each pass fetched."""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

from ddpdoctor.rank import failures, sites
from ddpdoctor.rank.probes.check.digests import (
    _batch_digest,
    _data_fingerprint,
    _framework_shard,
    _int_or_none,
    _known,
    _made_by,
    _safe_len,
    _sampler_chain,
)
from ddpdoctor.rank.probes.check.passes import INDEX_CAP, INDEX_PASSES, SET_EPOCH_DETAIL, _digest, _feed, _watch
from ddpdoctor.record import schema


def install(c: Any, torch: Any) -> None:
    """Wrap the sampler and loader methods; ``c`` is the rank's Checks."""
    from torch.utils.data import DataLoader, DistributedSampler, Subset

    # samplers: where each is built, its set_epoch calls, and the indices each rank draws per pass
    s_init = DistributedSampler.__init__

    @functools.wraps(s_init)
    def sampler_init(self: Any, *args: Any, **kwargs: Any) -> None:
        s_init(self, *args, **kwargs)
        if not c.main_thread() or _known(c.samplers.get(id(self)), self):
            return
        c.samplers[id(self)] = [len(c.samplers), 0, 0, weakref.ref(self)]
        try:
            c.event(
                schema.K_SAMPLER_INIT,
                sid=id(self),
                ordinal=c.samplers[id(self)][0],
                shuffle=bool(getattr(self, "shuffle", True)),
                seed=int(getattr(self, "seed", 0)),
                drop_last=bool(getattr(self, "drop_last", False)),
                num_replicas=int(self.num_replicas),
                sampler_rank=int(self.rank),
                dataset_len=_safe_len(self.dataset),
                site=sites.user_site(sys._getframe(1)),
            )
        except Exception as e:
            failures.report(
                c.p,
                "check sampler record",
                "a DistributedSampler's settings (set_epoch, seeds and shards are judged without it)",
                e,
            )

    DistributedSampler.__init__ = sampler_init

    s_set_epoch = DistributedSampler.set_epoch

    @functools.wraps(s_set_epoch)
    def set_epoch(self: Any, epoch: int) -> None:
        s_set_epoch(self, epoch)
        if c.main_thread():
            st = c.samplers.get(id(self))
            if _known(st, self):
                st[2] += 1
                if st[2] <= SET_EPOCH_DETAIL:
                    c.event(
                        schema.K_SET_EPOCH,
                        sid=id(self),
                        ordinal=st[0],
                        epoch=_int_or_none(epoch),
                        after=st[1],
                        n=st[2],
                        site=sites.user_site(sys._getframe(1)),
                    )

    DistributedSampler.set_epoch = set_epoch

    s_iter = DistributedSampler.__iter__

    @functools.wraps(s_iter)
    def sampler_iter(self: Any) -> Any:
        idx = list(s_iter(self))
        if not c.main_thread():
            return iter(idx)
        st = c.samplers.get(id(self))
        if not _known(st, self):  # built before the probes, or a recycled id
            st = c.samplers[id(self)] = [len(c.samplers), 0, 0, weakref.ref(self)]
        k = st[1]
        st[1] += 1
        keep = len(idx) <= INDEX_CAP and k < INDEX_PASSES
        c.event(
            schema.K_SAMPLER,
            sid=id(self),
            ordinal=st[0],
            k=k,
            epoch=_int_or_none(getattr(self, "epoch", 0)),
            seed=_int_or_none(getattr(self, "seed", 0)),
            shuffle=bool(getattr(self, "shuffle", True)),
            drop_last=bool(getattr(self, "drop_last", False)),
            num_replicas=int(self.num_replicas),
            sampler_rank=int(self.rank),
            dataset_len=_safe_len(self.dataset),
            n=len(idx),
            digest=_digest(idx),
            indices=idx if keep else None,
            site=sites.user_site(sys._getframe(1)),
        )
        inner = iter(idx)
        ps = c.open_pass("sampler", st[0], k, len(idx), inner)
        lp = c.fetching
        if lp is not None:  # drawn by a DataLoader pass: it trained when that pass trained
            lp.samplers.append(ps)
            c.unmarked_step.remove(ps)
            c.unmarked_fwd.remove(ps)
        gen = _feed(inner)
        _watch(c, gen, ps)
        return gen

    DistributedSampler.__iter__ = sampler_iter

    dl_init = DataLoader.__init__

    @functools.wraps(dl_init)
    def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
        dl_init(self, *args, **kwargs)
        if not c.main_thread():
            return
        try:
            ds = self.dataset
            sub = list(ds.indices) if isinstance(ds, Subset) and len(ds.indices) <= INDEX_CAP else None
            smp = self.sampler
            if not isinstance(smp, DistributedSampler) and self.batch_sampler is not None:
                smp = getattr(self.batch_sampler, "sampler", smp)
            chain = _sampler_chain(self)
            dsmp = next((s for s in chain if isinstance(s, DistributedSampler)), None)
            if dsmp is not None:
                smp = dsmp
            dist_smp = isinstance(smp, DistributedSampler)
            shard = _framework_shard(self, chain)
            c.loaders[id(self)] = len(c.loaders)
            c.event(
                schema.K_LOADER,
                lid=id(self),
                ordinal=c.loaders[id(self)],
                sampler=type(smp).__name__,
                sampler_sid=id(smp) if dist_smp else None,
                distributed=dist_smp,
                chain=[type(s).__name__ for s in chain],
                made_by=_made_by(sys._getframe(1)),
                shard=shard,
                shuffle=bool(getattr(smp, "shuffle", True)) if dist_smp else type(smp).__name__ == "RandomSampler",
                iterable=isinstance(ds, torch.utils.data.IterableDataset),
                dataset=type(ds).__name__,
                dataset_len=_safe_len(ds),
                batches=_safe_len(self),
                batch_size=self.batch_size,
                drop_last=self.drop_last,
                num_workers=self.num_workers,
                prefetch=(self.prefetch_factor or 0) * self.num_workers if self.num_workers else 0,
                subset_digest=_digest(sub) if sub is not None else None,
                subset=sub,
                data_fp=_data_fingerprint(ds),
                site=sites.user_site(sys._getframe(1)),
            )
        except Exception as e:
            failures.report(
                c.p,
                "check DataLoader record",
                "a DataLoader's settings (its sampler, data set and batches: the data checks judge without it)",
                e,
            )

    DataLoader.__init__ = loader_init

    # what each iterator really fetched: _next_index runs in the main process for every batch
    from torch.utils.data import dataloader as dl_mod

    base_iter = dl_mod._BaseDataLoaderIter
    it_init = base_iter.__init__

    @functools.wraps(it_init)
    def loader_iter_init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        it_init(self, loader, *args, **kwargs)
        # which loader this iterator serves (before a multi-process iterator prefetches in its __init__)
        o = c.loaders.get(id(loader))
        if o is not None and c.main_thread():
            try:
                self._ddpdoctor_loader = o
            except Exception:  # an iterator class with __slots__: its fetches are credited at the end instead
                pass

    base_iter.__init__ = loader_iter_init
    next_index = base_iter._next_index

    @functools.wraps(next_index)
    def loader_next_index(self: Any) -> Any:
        lp = self.__dict__.get("_ddpdoctor_pass")
        if lp is None or lp.src is not self._sampler_iter:
            if "_ddpdoctor_loader" not in self.__dict__:
                return next_index(self)
            try:
                lp = c.new_loader_pass(self, lp, sys._getframe(1))
            except Exception:
                lp = None
            if lp is None:
                return next_index(self)
        c.fetching = lp
        try:
            idx = next_index(self)
        except StopIteration:
            lp.exhausted = True
            raise
        finally:
            c.fetching = None
        try:
            lp.add(idx)
        except Exception:
            lp.kind = "opaque"
        if not lp.fresh:
            lp.fresh = True
            c.fresh.append(lp)
        c.last = lp
        return idx

    base_iter._next_index = loader_next_index
    it_next = base_iter.__next__

    @functools.wraps(it_next)
    def loader_next(self: Any) -> Any:
        batch = it_next(self)
        lp = self.__dict__.get("_ddpdoctor_pass")
        if lp is not None and lp.first is None and lp.kind == "none":
            # an IterableDataset yields no indices: the first batch tells whether ranks read the same stream
            try:
                lp.first = _batch_digest(batch)
            except Exception:
                lp.first = "?"
        return batch

    base_iter.__next__ = loader_next
