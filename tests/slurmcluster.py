"""A real SLURM cluster on this machine, for tests/e2e/slurm/: Debian's slurmctld, one slurmd per node and
munged, each node in a network namespace of its own with its own hostname (``n0``, ``n1``, ...).

The nodes' namespaces hang off a bridge in a hub namespace of their own, so every packet of the cluster (SLURM's,
torchrun's, gloo's, the job store's) stays inside the namespaces: nothing listens in the host's namespace.
Each node's names resolve through ``/etc/netns/<ns>/hosts`` (``ip netns exec`` mounts it over /etc/hosts);
its hostname is set in a UTS namespace of its own (``unshare --uts``), which the slurmd's tasks inherit.
slurmctld runs on n0, the "login node" too: ``srun``/``sbatch``/``scancel`` run there. munged runs in the
host's namespace (it speaks over a unix socket only). Every daemon is started in the foreground and stopped by
its pid; the configuration, state, logs and the shared scratch directory (the jobs' filesystem) are under
the test's tmp directory. Stdlib and psutil only.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

TOOLS = ("slurmctld", "slurmd", "munged", "srun", "sbatch", "scancel", "squeue", "ip", "unshare")
SUBNET = "10.35.0"  # inside the namespaces only: no clash with the host's networks
CPUS = 8  # per node, as configured (SlurmdParameters=config_overrides): two small jobs fit on one node


def missing() -> str | None:
    """Why a cluster cannot run here (not root, a tool or `ip netns` missing), else None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, slurmd)"
    lost = [t for t in TOOLS if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if lost:
        return f"needs {', '.join(lost)} (Debian: apt-get install slurm-wlm munge)"
    probe = f"ddpd-probe-{secrets.token_hex(3)}"
    try:
        subprocess.run(["ip", "netns", "add", probe], check=True, capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", probe], check=True, capture_output=True, timeout=10)
    except (subprocess.SubprocessError, OSError) as e:
        return f"`ip netns` does not work here ({type(e).__name__})"
    return None


def _run(*cmd: str, timeout: float = 20) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout).stdout


class SlurmCluster:
    """``nnodes`` nodes ``n0..``; :meth:`srun` / :meth:`sbatch` / :meth:`scancel` as a user on n0 would."""

    def __init__(self, root: Path, nnodes: int = 3) -> None:
        self.root, self.nnodes = root, nnodes
        self.tag = secrets.token_hex(3)
        self.hub = f"ddpd-{self.tag}-hub"
        self.names = [f"n{i}" for i in range(nnodes)]
        self.ns = {n: f"ddpd-{self.tag}-{n}" for n in self.names}
        self.addr = {n: f"{SUBNET}.{11 + i}" for i, n in enumerate(self.names)}
        self.scratch = root / "scratch"  # every node's shared filesystem
        self.conf = root / "etc" / "slurm.conf"
        self.daemons: dict[str, subprocess.Popen] = {}
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self._made: list[str] = []

    # -- set up -----------------------------------------------------------------------------------
    def start(self) -> SlurmCluster:
        """The namespaces, munged, slurmctld and the slurmds; returns once every node is idle (bounded)."""
        for d in ("etc", "state", "log", "spool", "scratch", "munge"):
            (self.root / d).mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)  # slurmd's tasks run as root, but the scratch path must be traversable
        os.chmod(self.scratch, 0o777)
        self._network()
        self._munge()
        self._config()
        self.daemons["slurmctld"] = self._spawn(
            "n0", "slurmctld", "-D", "-f", str(self.conf), "-L", str(self.root / "log" / "slurmctld.log")
        )
        for n in self.names:
            self.daemons[f"slurmd-{n}"] = self._spawn(
                n, "slurmd", "-D", "-N", n, "-f", str(self.conf), "-L", str(self.root / "log" / f"slurmd-{n}.log")
            )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                out = self.run_on("n0", "sinfo", "-h", "-N", "-o", "%N %t", timeout=10).stdout
            except subprocess.SubprocessError:
                out = ""
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            if len(states) == self.nnodes and all(s == "idle" for s in states.values()):
                return self
            for name, p in self.daemons.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}): {self.log_tail(name)}")
            time.sleep(0.5)
        raise RuntimeError(f"the nodes did not become idle in 60 s: {out!r}; {self.log_tail('slurmctld')}")

    def _network(self) -> None:
        _run("ip", "netns", "add", self.hub)
        self._made.append(self.hub)
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        _run("ip", "-n", self.hub, "link", "set", "lo", "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.addr[n]} {n}\n" for n in self.names)
        for i, n in enumerate(self.names):
            ns = self.ns[n]
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            # created in the hub, one end moved into the node: no interface ever exists in the host's namespace
            _run("ip", "-n", self.hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", self.hub, "link", "set", f"p{i}", "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.addr[n]}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)

    def _munge(self) -> None:
        m = self.root / "munge"
        key = m / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        self.sock = m / "munge.sock"
        self.daemons["munged"] = subprocess.Popen(
            [
                "munged",
                "-F",
                "-f",
                f"--socket={self.sock}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.time() + 20
        while not self.sock.exists() and time.time() < deadline:
            time.sleep(0.1)

    def _config(self) -> None:
        r = self.root
        for n in self.names:
            (r / "spool" / n).mkdir(mode=0o755, exist_ok=True)
        # no cgroups for the jobs (proctrack/linuxproc, task/none), but slurmd loads the cgroup plugin anyway,
        # and its autodetection fails on a hybrid hierarchy (/sys/fs/cgroup a tmpfs of v1 controllers)
        (self.conf.parent / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n")
        nodes = "".join(
            f"NodeName={n} NodeAddr={self.addr[n]} NodeHostname={n} CPUs={CPUS} RealMemory=2000 State=UNKNOWN\n"
            for n in self.names
        )
        self.conf.write_text(
            f"""ClusterName=ddpd{self.tag}
SlurmctldHost=n0({self.addr["n0"]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.sock}
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}/%n
SlurmctldPidFile={r / "state"}/slurmctld.pid
SlurmdPidFile={r / "spool"}/slurmd-%n.pid
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
MessageTimeout=20
KillWait=10
InactiveLimit=0
MinJobAge=300
SchedulerType=sched/builtin
{nodes}PartitionName=main Nodes={",".join(self.names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        )

    def _cmd(self, node: str, *cmd: str) -> list[str]:
        """``cmd`` on ``node``: in its network namespace and with its hostname (a UTS namespace of its own).
        The hostname and command go to ``sh`` as arguments, never into its script."""
        return [
            "ip",
            "netns",
            "exec",
            self.ns[node],
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            node,
            *cmd,
        ]

    def _spawn(self, node: str, *cmd: str) -> subprocess.Popen:
        # ip netns exec, unshare and sh all exec: the pid is the daemon's own
        return subprocess.Popen(
            self._cmd(node, *cmd),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )

    # -- use --------------------------------------------------------------------------------------
    def run_on(self, node: str, *cmd: str, timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
        """``cmd`` on ``node`` to its end (bounded)."""
        return subprocess.run(
            self._cmd(node, *cmd),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(self.env, **(env or {})),
            cwd=self.scratch,
        )

    def popen(self, node: str, cmd: Sequence[str], env: dict | None = None) -> subprocess.Popen:
        """``cmd`` on ``node`` (srun, say), its output piped; the caller bounds its wait."""
        return subprocess.Popen(
            self._cmd(node, *cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(self.env, **(env or {})),
            cwd=self.scratch,
            start_new_session=True,
        )

    def jobs(self) -> dict[str, str]:
        """The jobs SLURM still holds (pending, running, completing): job id -> squeue's state."""
        out = self.run_on("n0", "squeue", "-h", "-o", "%i %t", timeout=15).stdout
        return {f[0]: f[1] for f in map(str.split, out.splitlines()) if len(f) > 1 and f[1] not in ("CD", "F")}

    def node_pids(self, node: str) -> list[int]:
        """Every process in ``node``'s network namespace."""
        try:
            out = _run("ip", "netns", "pids", self.ns[node])
        except (subprocess.SubprocessError, OSError):
            return []
        return [int(x) for x in out.split()]

    def kill_node(self, node: str) -> None:
        """Power loss of ``node``: every process in its namespace SIGKILLed at once (slurmd, slurmstepd,
        ddpdoctor, torchrun, the ranks)."""
        for pid in self.node_pids(node):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.daemons.pop(f"slurmd-{node}", None)

    def log_tail(self, name: str, chars: int = 1500) -> str:
        path = self.root / "log" / f"{name}.log"
        try:
            return path.read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no {path})"

    # -- tear down --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Every job cancelled, every daemon stopped by its pid, every process left in a namespace killed,
        the namespaces and their /etc/netns folders removed. Bounded; safe after a failed start."""
        try:
            if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
                self.run_on("n0", "scancel", "--full", "--user=root", timeout=15)
                # until the jobs are gone or only completing: a job whose node was killed stays completing until
                # slurmctld gives the node up (tens of seconds, idle); its processes are killed by pid below
                deadline = time.time() + 30
                while time.time() < deadline and any(st != "CG" for st in self.jobs().values()):
                    time.sleep(0.5)
        except (subprocess.SubprocessError, OSError):
            pass
        # SIGTERM to slurmctld and every slurmd at once, then SIGKILL to those still there after 5 s (a slurmd
        # whose job is still completing waits for its slurmstepd: 15 s each, one after the other, before);
        # munged last: the others need it
        order = sorted(self.daemons, key=lambda k: k == "munged")
        for batch in ([n for n in order if n != "munged"], [n for n in order if n == "munged"]):
            live = [self.daemons[n] for n in batch if self.daemons[n].poll() is None]
            for p in live:
                p.terminate()
            deadline = time.time() + 5
            for p in live:
                try:
                    p.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        for n in self.names:  # slurmstepd and whatever a killed job left
            for pid in self.node_pids(n):
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
