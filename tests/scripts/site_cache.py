"""One call line, several shapes, dtypes and groups: the ledger must record every call as made (the
wrapper caches what it can per call line; issue 10)."""

import torch
import torch.distributed as dist


def reduce(t, group=None):
    dist.all_reduce(t, group=group)  # CALL


def main():
    dist.init_process_group("gloo")
    for shape in ((2,), (3,), (2,), (2, 2)):
        reduce(torch.ones(shape))
    reduce(torch.ones(2, dtype=torch.int64))
    sub = dist.new_group([0, 1])
    reduce(torch.ones(4), group=sub)
    reduce(torch.ones(4))
    reduce(torch.ones(5))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
