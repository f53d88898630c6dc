"""The accuracy corpus: which script runs under which ddpdoctor command, and what the report must say.

Plain data (no torch import). Read by benchmarks/accuracy.py and tests/test_corpus.py.

Each case:
  id          unique name, "<script stem>:<command>"
  script      file in tests/corpus/
  args        the script's own arguments (after `--`)
  command     hang | check | memleak | profile
  options     ddpdoctor options for that command (e.g. --timeout 20, --census-every 10)
  nproc       ranks (for mp.spawn scripts: the world size the script spawns; ddpdoctor is given no -n)
  verdict     expected report verdict (ok | hang | crash | findings)
  exit_code   expected exit code
  error_ids   the exact set of error-severity finding ids expected (empty for healthy cases)
  tolerate    error-severity ids that may also appear without failing the case (a consequence of the
              planted fault, e.g. shard overlap caused by a sampler seed mismatch)
  warn_ids    warning-severity ids that must appear (a planted performance fault)
  primary     the finding whose culprits and line are checked (None: nothing to check)
  culprits    acceptable culprit-rank sets for the primary finding (any one of them passes)
  markers     accepted line markers: the primary finding must name, for a culprit rank, a line of the
              script that carries a trailing comment `# <marker>` (e.g. `# FAULT`); () = no line check
  fast        part of `--subset fast` and of tests/test_corpus.py
"""

from __future__ import annotations

HANG_OPTS = ("--timeout", "60")          # the default: an uncertain wait becomes a hang after 60 s
# (20 s gave false hang.timeout on a loaded 2-core machine: an mp.spawn child started 20 s after its peer)
MEMLEAK_OPTS = ("--census-every", "10")


def _case(id, script, command, *, args=(), options=(), nproc=2, verdict="ok", exit_code=0, error_ids=(),
          tolerate=(), warn_ids=(), primary=None, culprits=(), markers=("FAULT",), fast=False, note=""):
    if not options:
        options = {"hang": HANG_OPTS, "memleak": MEMLEAK_OPTS}.get(command, HANG_OPTS)
    return {"id": id, "script": script, "args": tuple(args), "command": command, "options": tuple(options),
            "nproc": nproc, "verdict": verdict, "exit_code": exit_code, "error_ids": frozenset(error_ids),
            "tolerate": frozenset(tolerate), "warn_ids": frozenset(warn_ids), "primary": primary,
            "culprits": tuple(tuple(c) for c in culprits), "markers": tuple(markers) if primary else (),
            "fast": fast, "note": note}


# healthy and tricky-but-healthy scripts, with their arguments
HEALTHY = {
    "h01_tutorial_torchrun.py": ("3", "1", "--batch_size", "32"),
    "h02_multinode_resume.py": ("4", "1", "--batch_size", "16"),
    "h03_spawn_multigpu.py": ("2", "1", "--batch_size", "32"),
    "h04_torchvision_ref.py": ("--epochs", "2", "--batch-size", "16"),
    "h05_nanogpt.py": ("--max_iters", "24"),
    "h06_lightning_hooks.py": ("--max_epochs", "3"),
    "h07_accelerate_like.py": ("--num_epochs", "2"),
    "h08_iterable_stream.py": ("--epochs", "2", "--num_workers", "2"),
    "h09_amp_bf16.py": ("--epochs", "2"),
    "h10_find_unused.py": ("--steps", "30"),
    "h11_join_uneven.py": ("--epochs", "2"),
    "h12_gan.py": ("--epochs", "2"),
    "h13_grad_checkpoint.py": ("--steps", "20"),
    "h14_ddp_tutorial_ckpt.py": (),
    "h15_imagenet_style.py": ("--epochs", "2", "-b", "16"),
    "t16_peek_shapes.py": ("--epochs", "3"),
    "t17_val_sampler_no_set_epoch.py": ("--epochs", "3"),
    "t18_rank0_log_barrier.py": ("--epochs", "3"),
    "t19_presharded.py": ("--epochs", "2"),
    "t20_eval_rank0_only.py": ("--epochs", "3"),
}
# healthy scripts that also run under memleak and profile (longer loops; the others are too short to judge)
HEALTHY_MEMLEAK = {"h05_nanogpt.py": ("--max_iters", "60"), "h09_amp_bf16.py": ("--epochs", "4"),
                   "h12_gan.py": ("--epochs", "6"), "h13_grad_checkpoint.py": ("--steps", "80")}
HEALTHY_PROFILE = {"h01_tutorial_torchrun.py": ("3", "1", "--batch_size", "16"),
                   "h10_find_unused.py": ("--steps", "60"), "h12_gan.py": ("--epochs", "3"),
                   "t20_eval_rank0_only.py": ("--epochs", "3")}
FAST_HEALTHY = {("h01_tutorial_torchrun.py", "check"), ("t18_rank0_log_barrier.py", "check"),
                ("h03_spawn_multigpu.py", "hang")}  # mp.spawn with `from torch.distributed import ...`

CASES: list[dict] = []
for _script, _args in HEALTHY.items():
    for _cmd in ("hang", "check"):
        CASES.append(_case(f"{_script[:-3]}:{_cmd}", _script, _cmd, args=_args,
                           fast=(_script, _cmd) in FAST_HEALTHY))
for _script, _args in HEALTHY_MEMLEAK.items():
    CASES.append(_case(f"{_script[:-3]}:memleak", _script, "memleak", args=_args))
for _script, _args in HEALTHY_PROFILE.items():
    CASES.append(_case(f"{_script[:-3]}:profile", _script, "profile", args=_args))

CASES += [
    _case("f21_tutorial_no_set_epoch:check", "f21_tutorial_no_set_epoch.py", "check", args=("3", "2"),
          verdict="findings", exit_code=1, error_ids={"data.missing-set-epoch"}, primary="data.missing-set-epoch",
          culprits=[(0, 1)], fast=True),
    _case("f22_save_branch_allreduce:hang", "f22_save_branch_allreduce.py", "hang", args=("3", "1"),
          verdict="hang", exit_code=3, error_ids={"hang.rank-conditional-collective"},
          primary="hang.rank-conditional-collective", culprits=[(0,)], markers=("FAULT", "FAULT-CALLER"), fast=True),
    _case("f23_async_allreduce_rank0:hang", "f23_async_allreduce_rank0.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.rank-conditional-collective"},
          primary="hang.rank-conditional-collective", culprits=[(0,)]),
    _case("f24_early_stop_nan:hang", "f24_early_stop_nan.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.early-exit"}, primary="hang.early-exit",
          culprits=[(1,)], markers=("FAULT", "FAULT-LAST")),
    _case("f25_uneven_no_join:hang", "f25_uneven_no_join.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.uneven-batches"}, primary="hang.uneven-batches",
          culprits=[(1,), (0, 1)], note="culprit: the rank that ran out of batches first, or every rank"),
    _case("f26_losses_list_graph:memleak", "f26_losses_list_graph.py", "memleak",
          verdict="findings", exit_code=1, error_ids={"memleak.autograd-graph"}, primary="memleak.autograd-graph",
          culprits=[(0, 1)], tolerate={"memleak.tensors", "memleak.rss", "memleak.python-objects"}),
    _case("f27_rank0_outputs:memleak", "f27_rank0_outputs.py", "memleak",
          verdict="findings", exit_code=1, error_ids={"memleak.autograd-graph"}, primary="memleak.autograd-graph",
          culprits=[(0,)], tolerate={"memleak.tensors", "memleak.rss", "memleak.python-objects"}, fast=True),
    _case("f28_straggler_sleep:profile", "f28_straggler_sleep.py", "profile",
          verdict="ok", exit_code=0, warn_ids={"profile.straggler"}, primary="profile.straggler", culprits=[(1,)]),
    _case("f29_allgather_shape:hang", "f29_allgather_shape.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.shape-mismatch"}, primary="hang.shape-mismatch",
          culprits=[(0, 1)]),
    _case("f30_exception_rank1:hang", "f30_exception_rank1.py", "hang",
          verdict="crash", exit_code=1, error_ids={"crash.exception"}, primary="crash.exception",
          culprits=[(1,)], fast=True),
    _case("f31_shard_overlap:check", "f31_shard_overlap.py", "check", args=("2", "1"),
          verdict="findings", exit_code=1, error_ids={"data.shard-overlap"}, primary="data.shard-overlap",
          culprits=[(0, 1)]),
    _case("f32_init_seed_no_sync:check", "f32_init_seed_no_sync.py", "check",
          verdict="findings", exit_code=1, error_ids={"drift.init-mismatch"}, primary="drift.init-mismatch",
          culprits=[(0, 1), (1,)], markers=("FAULT", "FAULT-SEED"), tolerate={"drift.parameters"}),
    _case("f33_ckpt_all_ranks:check", "f33_ckpt_all_ranks.py", "check", args=("2", "1"),
          verdict="findings", exit_code=1, error_ids={"checkpoint.multiple-writers"},
          primary="checkpoint.multiple-writers", culprits=[(0, 1)]),
    _case("f34_metric_logger_rank0_sync:hang", "f34_metric_logger_rank0_sync.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.rank-conditional-collective"},
          primary="hang.rank-conditional-collective", culprits=[(0,)], markers=("FAULT", "FAULT-INNER")),
    _case("f35_accum_no_sync:check", "f35_accum_no_sync.py", "check",
          verdict="ok", exit_code=0, warn_ids={"perf.grad-accum-no-sync"}, primary="perf.grad-accum-no-sync",
          culprits=[(0, 1)]),
    _case("f36_sampler_seed_rank:check", "f36_sampler_seed_rank.py", "check",
          verdict="findings", exit_code=1, error_ids={"data.sampler-seed-mismatch"},
          primary="data.sampler-seed-mismatch", culprits=[(0, 1), (1,)], markers=("FAULT", "FAULT-LOOP"),
          tolerate={"data.shard-overlap"}),
    _case("f37_iterable_no_shard:check", "f37_iterable_no_shard.py", "check",
          verdict="findings", exit_code=1, error_ids={"data.shard-overlap"}, primary="data.shard-overlap",
          culprits=[(0, 1)], fast=True),
    _case("f38_spawn_exception:hang", "f38_spawn_exception.py", "hang",
          verdict="crash", exit_code=1, error_ids={"crash.exception"}, primary="crash.exception", culprits=[(1,)]),
    _case("f39_bn_no_broadcast:check", "f39_bn_no_broadcast.py", "check",
          verdict="findings", exit_code=1, error_ids={"drift.buffers"}, primary="drift.buffers", culprits=[(0, 1)]),
    # issue 25: culprits, not suspects
    _case("f40_epoch_val_rank0_barrier:hang", "f40_epoch_val_rank0_barrier.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.rank-conditional-collective"},
          primary="hang.rank-conditional-collective", culprits=[(0,)]),
    _case("f41_async_comm_helper_rank0:hang", "f41_async_comm_helper_rank0.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.rank-conditional-collective"},
          primary="hang.rank-conditional-collective", culprits=[(0,)], markers=("FAULT", "FAULT-CALLER")),
    _case("f42_nanogpt_module_early_stop:hang", "f42_nanogpt_module_early_stop.py", "hang",
          verdict="hang", exit_code=3, error_ids={"hang.early-exit"}, tolerate={"crash.abnormal-exit"},
          primary="hang.early-exit", culprits=[(1,)]),
    _case("f43_custom_backward_straggler:profile", "f43_custom_backward_straggler.py", "profile",
          args=("--steps", "200"), verdict="ok", exit_code=0, warn_ids={"profile.straggler"},
          primary="profile.straggler", culprits=[(1,)]),
    _case("f44_two_ranks_rank_subset_reduce:hang", "f44_two_ranks_rank_subset_reduce.py", "hang", nproc=4,
          verdict="hang", exit_code=3, error_ids={"hang.rank-conditional-collective"},
          primary="hang.rank-conditional-collective", culprits=[(0, 2)]),
]

assert len({c["id"] for c in CASES}) == len(CASES), "duplicate case ids"
