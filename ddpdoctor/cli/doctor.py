"""``ddpdoctor doctor``: the health check of the machine or cluster, then the self-test of the built-in probes."""

from __future__ import annotations

import sys
from typing import Any

import click

from ddpdoctor.cli.options import GroupedCommand, output_options, passed_torchrun_options
from ddpdoctor.errors import DdpdoctorError


@click.command(cls=GroupedCommand, short_help="Health check of this machine or cluster, and the self-test.")
@click.option("--skip-probes", is_flag=True, help="Leave out the self-test of the built-in probes.")
@click.option("--skip-health", is_flag=True, help="Leave out the health check (environment, collectives).")
@click.option("--only", multiple=True, metavar="PROBE", help="Run only this probe, e.g. crash.py (repeatable).")
@click.option(
    "--min-busbw",
    type=click.FloatRange(min=0),
    default=None,
    metavar="GBPS",
    help="Fail below this all_reduce bus bandwidth (GB/s).",
)
@click.option(
    "--sizes",
    default=None,
    metavar="LIST",
    help="Bandwidth sweep sizes, e.g. 64K,1M,16M.  [default: by backend]",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "gloo", "nccl"]),
    default="auto",
    show_default=True,
    help="The health check's backend (auto: nccl on a GPU).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    metavar="S",
    default=60.0,
    show_default=True,
    help="Seconds a rendezvous or collective may take",
)
@passed_torchrun_options
@click.option(
    "--run-dir",
    "runs_root",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Folder of the runs.  [default: ./ddpdoctor-runs/doctor-TIME]",
)
@output_options
def doctor(
    skip_probes: bool,
    skip_health: bool,
    only: tuple[str, ...],
    min_busbw: float | None,
    sizes: str | None,
    backend: str,
    timeout: float,
    runs_root: str | None,
    json_path: str | None,
    junit_path: str | None,
    fail_on: str,
    select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    html_path: str | None = None,
    **torchrun: Any,
) -> None:
    """Health check of this machine or cluster, then the self-test of the built-in probes.

    \b
    environment: Python, torch, CUDA/NCCL/cuDNN, GPUs (NVML), backends, network interfaces and
                 GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME, /dev/shm, open-files limit, MASTER_ADDR
    collectives: all_reduce (sum, max), all_gather, reduce_scatter, broadcast, all_to_all, barrier,
                 send/recv; float32, int64, bfloat16; correct result on every rank
    bandwidth:   algbw and busbw (nccl-tests' definitions) over a sweep of sizes, the slowest rank
    probes:      every built-in probe gives the finding its docstring names (--skip-probes: not run)

    \b
    ddpdoctor doctor --skip-probes --min-busbw 100 --json health.json
    ddpdoctor doctor --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --skip-probes
    """
    from ddpdoctor.cli.project import selection
    from ddpdoctor.health.selftest import run_doctor

    select, ignore = selection(select, ignore)

    size_list = None
    if sizes:
        from ddpdoctor.health.run import parse_sizes

        try:
            size_list = parse_sizes(sizes)
        except ValueError as e:
            raise DdpdoctorError(f"--sizes: {e}") from None
    sys.exit(
        run_doctor(
            only,
            runs_root,
            json_path,
            junit_path,
            fail_on=fail_on,
            skip_probes=skip_probes,
            skip_health=skip_health,
            torchrun=torchrun,
            backend=backend,
            timeout=timeout,
            sizes=size_list,
            min_busbw=min_busbw,
            select=select,
            ignore=ignore,
        )
    )
