"""torchrun's whole command line, as a static table: every option of ``torch.distributed.run``, its ``_``
spelling, its ``PET_*`` variable, and what ddpdoctor does with it. Stdlib only: ``ddpdoctor --help`` lists
these options without importing torch. ``tests/unit/launch/test_torchrun_options.py`` diffs the table
against the installed ``torch.distributed.run.get_args_parser()``, so a torch release that adds, renames or
drops an option fails a test instead of reaching a user as "No such option".

What ddpdoctor does with each (``Handling``):

- ``pass``: handed to torchrun as given.
- ``module`` (``-m``): the script is a module's name; each rank runs it as ``python -m`` would
  (rank/bootstrap.py), while torchrun itself runs ddpdoctor's rank bootstrap.
- ``logs`` (``--log-dir``, ``--redirects``, ``--tee``): the tool always captures every worker's streams
  into the run directory (``--log-dir RUN_DIR/logs --tee 3``); the user's log folder gets a copy of what
  torchrun would have put there when the run ends, and ``--redirects`` keeps the redirected streams off the
  console, as torchrun would.
- ``launcher`` (``--no-python``): torchrun runs the user's program in every rank; the probes enter the
  Python ranks it starts through the environment (rank/enter.py), as in the launcher form ``-- COMMAND``.
- ``note``: honoured in effect, with one line that says how.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TorchrunOption:
    """One option of torchrun: its spellings (the ``-`` one first), whether it takes no value, the click
    metavar and help, and what ddpdoctor does with it."""

    names: tuple[str, ...]
    flag: bool
    metavar: str
    help: str
    handling: str = "pass"
    env: bool = True  # torchrun reads it from PET_<KEY> when not given (two of its options it does not)

    @property
    def key(self) -> str:
        """The parameter's name: torchrun's ``dest``, and click's."""
        long = [n for n in self.names if n.startswith("--")][0]
        return long[2:].replace("-", "_")

    @property
    def pet(self) -> str | None:
        """torchrun's environment variable for the option (read when the option is not given), if any."""
        return "PET_" + self.key.upper() if self.env else None

    @property
    def flag_name(self) -> str:
        """The spelling passed to torchrun."""
        return [n for n in self.names if n.startswith("--")][0]


def _o(
    names: str, metavar: str, help_: str, handling: str = "pass", flag: bool = False, env: bool = True
) -> TorchrunOption:
    return TorchrunOption(tuple(names.split()), flag, metavar, help_, handling, env)


TORCHRUN_OPTIONS: tuple[TorchrunOption, ...] = (
    _o("--nproc-per-node --nproc_per_node", "N|auto|cpu|gpu", "Workers per node (default: GPUs, else 2)."),
    _o("--nnodes", "N|MIN:MAX", "Number of nodes."),
    _o("--node-rank --node_rank", "N", "This node's rank (static rdzv)."),
    _o("--rdzv-backend --rdzv_backend", "NAME", "Rendezvous backend, e.g. c10d."),
    _o("--rdzv-endpoint --rdzv_endpoint", "HOST:PORT", "Rendezvous endpoint."),
    _o("--rdzv-id --rdzv_id", "ID", "Rendezvous job id."),
    _o("--rdzv-conf --rdzv_conf", "K=V,...", "Rendezvous configuration."),
    _o("--standalone", "", "A rendezvous on a free local port.", flag=True),
    _o("--master-addr --master_addr", "HOST", "Master address (static rdzv)."),
    _o("--master-port --master_port", "PORT", "Master port (static rdzv)."),
    _o("--local-addr --local_addr", "HOST", "This node's address."),
    _o("--max-restarts --max_restarts", "N", "Restart the workers up to N times."),
    _o("--monitor-interval --monitor_interval", "S", "torchrun's poll of its workers."),
    _o("--start-method --start_method", "NAME", "spawn, fork or forkserver."),
    _o("--event-log-handler --event_log_handler", "NAME", "torchrun's event log handler."),
    _o("--role", "NAME", "The workers' role."),
    _o("-m --module", "", "SCRIPT is a module (python -m).", "module", flag=True),
    _o(
        "--no-python --no_python",
        "",
        "Each rank runs SCRIPT as a program.",
        "launcher",
        flag=True,
    ),
    _o("--run-path --run_path", "", "Accepted: ranks are processes.", "note", flag=True),
    _o("--log-dir --log_dir", "DIR", "Worker logs copied here at the end.", "logs"),
    _o("-r --redirects", "STD", "Streams kept off the console.", "logs"),
    _o("-t --tee", "STD", "Accepted: streams are teed anyway.", "logs"),
    _o("--local-ranks-filter --local_ranks_filter", "R,...", "Local ranks shown on the console."),
    _o("--duplicate-stdout-filters --duplicate_stdout_filters", "A,B", "Filtered stdout copy."),
    _o("--duplicate-stderr-filters --duplicate_stderr_filters", "A,B", "Filtered stderr copy."),
    _o("--logs-specs --logs_specs", "NAME", "LogsSpecs entry point.", env=False),
    _o("--numa-binding --numa_binding", "NAME", "Bind workers near their GPUs.", env=False),
    _o("--signals-to-handle --signals_to_handle", "SIG,...", "Signals forwarded to workers."),
    _o("--shutdown-timeout --shutdown_timeout", "S", "Grace before workers are killed."),
    _o("--virtual-local-rank --virtual_local_rank", "", "Every worker sees LOCAL_RANK 0.", flag=True),
)

BY_KEY = {o.key: o for o in TORCHRUN_OPTIONS}
# the keys ddpdoctor hands to torchrun as they are
PASSED = tuple(o.key for o in TORCHRUN_OPTIONS if o.handling == "pass")
# the PET_* variables of the options the tool takes over: torchrun must not read them beside the tool's
# own arguments (PET_NO_PYTHON would make it run ddpdoctor's bootstrap as a program); the ranks get them
# back (rank/bootstrap.py), so that the script's environment is what bare torchrun would give it
OWN_PET = tuple(o.pet for o in TORCHRUN_OPTIONS if o.handling != "pass" and o.pet)


def std_map(value: str | None) -> dict[int, int] | int:
    """torchrun's ``--redirects``/``--tee`` value: ``3`` -> 3 (every local rank), ``0:1,1:2`` -> {0: 1, 1: 2}.
    Raises ValueError on anything else."""
    text = (value or "0").strip()
    if ":" not in text:
        n = int(text)
        if not 0 <= n <= 3:
            raise ValueError(text)
        return n
    out: dict[int, int] = {}
    for part in text.split(","):
        lr, std = part.split(":", 1)
        n = int(std)
        if not 0 <= n <= 3:
            raise ValueError(text)
        out[int(lr)] = n
    return out
