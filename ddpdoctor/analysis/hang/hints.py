"""The advice of the hang findings, fitted to the frameworks the ranks imported. Pure."""

from __future__ import annotations

from ddpdoctor.analysis.ids import (
    HANG_DIVERGENT_COLLECTIVE,
    HANG_EARLY_EXIT,
    HANG_RANK_CONDITIONAL_COLLECTIVE,
    HANG_SHAPE_MISMATCH,
    HANG_TIMEOUT,
    HANG_TRANSPORT_STALL,
    HANG_UNEVEN_BATCHES,
)
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

HINTS = {
    HANG_RANK_CONDITIONAL_COLLECTIVE: (
        "Every rank must make the same collectives in the same order: move the collective out of the "
        "`if rank == ...:` block (guard only the side effect, e.g. printing or saving)."
    ),
    HANG_EARLY_EXIT: (
        "A rank left the loop (early stopping, break, return, sys.exit) while the others went on: decide "
        "to stop together, e.g. all_reduce a stop flag (MAX) and break on every rank."
    ),
    HANG_UNEVEN_BATCHES: (
        "Ranks ran different numbers of DDP steps: use DistributedSampler (drop_last=True for the "
        "DataLoader if the data set does not divide evenly), or wrap the loop in "
        "`with model.join():` (torch.distributed.algorithms.Join)."
    ),
    HANG_SHAPE_MISMATCH: (
        "The ranks passed tensors of different shape or dtype to the same collective: make the sizes "
        "agree (pad, or all_gather the sizes first)."
    ),
    HANG_DIVERGENT_COLLECTIVE: (
        "The ranks issued different collectives at the same position: make the code path that reaches "
        "collectives identical on every rank."
    ),
    HANG_TIMEOUT: (
        "One rank waited in a collective while another was still busy for longer than --timeout: if the "
        "busy rank is doing rank-only work (evaluation, checkpointing), give the others the same work or "
        "raise the backend timeout; if it never arrives, see where it is."
    ),
    HANG_TRANSPORT_STALL: (
        "Every rank is inside the same collective and nothing moves: a backend or network stall, not a "
        "code divergence. Check interfaces (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME), firewalls, and "
        "NCCL_DEBUG=INFO."
    ),
}

P2P_HINT = (
    "Point-to-point messages must pair up: every recv/irecv needs a send/isend from its source on the same "
    "group. Post the sends before waiting on the receives (isend, then wait), or use batch_isend_irecv so "
    "both directions are posted together."
)

# hang.timeout when every rank is blocked outside a collective call
BLOCKED_HINT = (
    "Every rank is blocked outside a collective call (Work.wait() of an async collective, a receive, a "
    "sync point such as .item()) and nothing moves: look for a Work, irecv or async collective that only "
    "some ranks issued, or a send that never happens; the ledger in the run directory lists each rank's "
    "collectives in order."
)

FRAMEWORK_HINTS = {
    (HANG_RANK_CONDITIONAL_COLLECTIVE, "lightning"): (
        " Lightning: hooks run on every rank; `self.all_gather`, `self.log(..., sync_dist=True)` and "
        "`trainer.strategy.barrier()` must be reached by every rank; keep `if self.trainer.is_global_zero:` "
        "around the side effect only (or use `@rank_zero_only` on a function without collectives)."
    ),
    (HANG_RANK_CONDITIONAL_COLLECTIVE, "accelerate"): (
        " Accelerate: `accelerator.gather_for_metrics`, `gather`, `reduce` and `wait_for_everyone()` must run "
        "on every process; keep `if accelerator.is_main_process:` around the printing or saving only."
    ),
    (HANG_EARLY_EXIT, "lightning"): (
        " Lightning: stop every rank together with `self.trainer.should_stop = True` (Lightning syncs it) or "
        "the EarlyStopping callback, never a per-rank return."
    ),
    (HANG_EARLY_EXIT, "accelerate"): (
        " Accelerate: decide to stop with `accelerator.set_trigger()` and `accelerator.check_trigger()`, which "
        "agree across processes, then break on every rank."
    ),
}


def frameworks(record: RunRecord) -> list[str]:
    """The training frameworks the ranks had imported when they initialised (Lightning, Accelerate...)."""
    out: list[str] = []
    for rec in record.ranks.values():
        for m in (rec.event(schema.K_INIT) or {}).get("frameworks") or ():
            name = "lightning" if m == "pytorch_lightning" else str(m)
            if name not in out:
                out.append(name)
    return out


def hint_for(record: RunRecord, fid: str) -> str:
    """The hint of finding ``fid``, with the advice for each framework the ranks imported."""
    return HINTS[fid] + "".join(FRAMEWORK_HINTS.get((fid, fw), "") for fw in frameworks(record))


def uneven_hint(record: RunRecord) -> str:
    """Advice that fits: a script that already uses DistributedSampler needs drop_last or join()."""
    samplers = {
        str(e.get("sampler", ""))
        for rec in record.ranks.values()
        for e in rec.events
        if e.get("kind") == schema.K_DATALOADER
    }
    if any("Distributed" in x for x in samplers):
        return (
            "The DistributedSampler pads every rank to the same number of samples, but the batches still "
            "differ: pass drop_last=True to the DataLoader, or wrap the loop in `with model.join():` "
            "(torch.distributed.algorithms.Join) for inputs that are uneven by design."
        )
    return HINTS[HANG_UNEVEN_BATCHES]
