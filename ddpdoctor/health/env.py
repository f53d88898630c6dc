"""The environment of the node that runs ``ddpdoctor doctor``: versions, GPUs (NVML), backends, network
interfaces, /dev/shm, the open-files limit, MASTER_ADDR. ``collect`` reads the machine (each read bounded;
nothing raises); ``findings`` is pure."""

from __future__ import annotations

import os
import platform
import socket
import sys
import threading
from typing import Any

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.ids import (
    DOCTOR_GPU_ECC,
    DOCTOR_MASTER_ADDR,
    DOCTOR_NO_TORCH,
    DOCTOR_OPEN_FILES,
    DOCTOR_PORT_IN_USE,
    DOCTOR_SHM_SMALL,
    DOCTOR_SOCKET_IFNAME,
)
from ddpdoctor.health import frsettings

SHM_MIN = 1 << 30  # Docker's default /dev/shm is 64 MiB: DataLoader workers die with a bus error
NOFILE_MIN = 4096  # DataLoader workers share tensors through file descriptors


def _torch() -> dict[str, Any]:
    try:
        import warnings

        with warnings.catch_warnings():  # "Failed to initialize NumPy" and the like: not this report's business
            warnings.simplefilter("ignore")
            import torch
            import torch.distributed as dist
    except Exception as e:  # noqa: BLE001
        return {"torch": None, "error": f"cannot import torch: {e}"}
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": None,
        "cudnn": None,
        "cuda_available": torch.cuda.is_available(),
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        pass
    try:
        out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001
        pass
    out["backends"] = {
        name: bool(getattr(dist, f"is_{name}_available", lambda: False)()) for name in ("gloo", "nccl", "mpi", "ucc")
    }
    return out


def _gpus() -> dict[str, Any]:
    try:
        import pynvml
    except Exception:  # noqa: BLE001
        return {"nvml": "not installed", "devices": []}
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return {"nvml": f"unavailable ({type(e).__name__})", "devices": []}
    devs = []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            d: dict[str, Any] = {
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            }
            try:
                d["ecc_uncorrected"] = int(
                    pynvml.nvmlDeviceGetTotalEccErrors(
                        h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
                    )
                )
            except Exception:  # noqa: BLE001 - ECC off or not supported on this board
                d["ecc_uncorrected"] = None
            devs.append(d)
    except Exception as e:  # noqa: BLE001
        return {"nvml": f"error ({type(e).__name__})", "devices": devs}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return {"nvml": "ok", "driver": driver.decode() if isinstance(driver, bytes) else driver, "devices": devs}


def _interfaces() -> dict[str, Any]:
    import psutil

    stats = psutil.net_if_stats()
    out = {}
    for name, addrs in psutil.net_if_addrs().items():
        out[name] = {
            "up": bool(stats.get(name) and stats[name].isup),
            "ipv4": [a.address for a in addrs if a.family == socket.AF_INET],
            "ipv6": [a.address.split("%")[0] for a in addrs if a.family == socket.AF_INET6],
        }
    return out


def _resolve(host: str, timeout: float = 5.0) -> dict[str, Any]:
    """getaddrinfo in a thread, bounded: a broken DNS must not stall the doctor."""
    res: dict[str, Any] = {"host": host, "addresses": None, "error": "no answer within 5 s"}

    def work() -> None:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            res.update(addresses=sorted({i[4][0] for i in infos}), error=None)
        except OSError as e:
            res.update(error=str(e))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout)
    return res


def _port_free(port: int) -> bool | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def collect(master_addr: str | None, master_port: int | None, node_rank: int | None) -> dict[str, Any]:
    import resource

    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
    }
    env.update(_torch())
    env["gpus"] = _gpus()
    try:
        env["interfaces"] = _interfaces()
    except Exception as e:  # noqa: BLE001
        env["interfaces"] = {}
        env["interfaces_error"] = str(e)
    env["socket_ifname"] = {k: os.environ.get(k) for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    env["flight_recorder"] = frsettings.collect()
    try:
        st = os.statvfs("/dev/shm")
        env["shm"] = {"total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}
    except OSError:
        env["shm"] = None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    env["open_files"] = {"soft": soft, "hard": hard}
    addr = master_addr or os.environ.get("MASTER_ADDR")
    port = master_port or (int(os.environ["MASTER_PORT"]) if os.environ.get("MASTER_PORT", "").isdigit() else None)
    env["master"] = {"addr": addr, "port": port}
    if addr:
        env["master"].update(_resolve(addr))
        local = {a for i in env["interfaces"].values() for a in i["ipv4"] + i["ipv6"]}
        env["master"]["local"] = bool(set(env["master"].get("addresses") or ()) & (local | {"127.0.0.1", "::1"}))
        if port and (node_rank in (None, 0)) and env["master"]["local"]:
            env["master"]["port_free"] = _port_free(port)
    return env


# -- findings (pure) --------------------------------------------------------------------------------------


def _ifname_missing(value: str, names: set[str], nccl: bool) -> list[str]:
    """The names of ``value`` that match no interface. GLOO_SOCKET_IFNAME: exact names, comma-separated.
    NCCL_SOCKET_IFNAME: prefixes; ``=name`` exact; ``^...`` excludes (never missing)."""
    if nccl and value.startswith("^"):
        return []
    exact = not nccl
    if nccl and value.startswith("="):
        value, exact = value[1:], True
    return [
        p
        for p in (v.strip() for v in value.split(","))
        if p and not (p in names if exact else any(n.startswith(p) for n in names))
    ]


def usable(env: dict[str, Any]) -> list[str]:
    """Interfaces that are up and have an address, loopback last."""
    ifs = env.get("interfaces") or {}
    names = [n for n, i in ifs.items() if i["up"] and (i["ipv4"] or i["ipv6"])]
    return sorted(names, key=lambda n: (n == "lo" or n.startswith("lo"), n))


def findings(env: dict[str, Any], backend: str) -> list[Finding]:
    out: list[Finding] = []
    names = set(env.get("interfaces") or {})
    ok_names = ", ".join(usable(env)) or "none"
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = (env.get("socket_ifname") or {}).get(var)
        if not value:
            continue
        missing = _ifname_missing(value, names, var.startswith("NCCL"))
        used = (var.startswith("GLOO") and backend == "gloo") or (var.startswith("NCCL") and backend == "nccl")
        if missing:
            out.append(
                Finding(
                    DOCTOR_SOCKET_IFNAME,
                    "error" if used else "warning",
                    f"{var}={value} names {'an interface' if len(missing) == 1 else 'interfaces'} "
                    f"this host does not have: {', '.join(missing)}"
                    + ("" if used else f" (not used by the {backend} backend of this run)"),
                    f"Set {var} to an interface that exists and is up (here: {ok_names}), or unset it.",
                    evidence={"var": var, "value": value, "missing": missing, "interfaces": sorted(names)},
                )
            )
        else:
            down = [n for n in names if value.strip("=") == n and not env["interfaces"][n]["up"]]
            if down:
                out.append(
                    Finding(
                        DOCTOR_SOCKET_IFNAME,
                        "error" if used else "warning",
                        f"{var}={value}: interface {down[0]} is down",
                        f"Bring it up or name another interface (up here: {ok_names}).",
                        evidence={"var": var, "value": value},
                    )
                )
    shm = env.get("shm")
    if shm and shm["total_bytes"] < SHM_MIN:
        out.append(
            Finding(
                DOCTOR_SHM_SMALL,
                "warning",
                f"/dev/shm is {shm['total_bytes'] / 2**20:.0f} MiB (Docker's default is 64 MiB): DataLoader "
                "workers pass batches through it and die with a bus error when it is full",
                "Run the container with --shm-size=8g (or --ipc=host); on Kubernetes mount an emptyDir "
                "with medium: Memory at /dev/shm.",
                evidence=dict(shm),
            )
        )
    nofile = env.get("open_files") or {}
    if nofile and 0 <= nofile.get("soft", NOFILE_MIN) < NOFILE_MIN:
        out.append(
            Finding(
                DOCTOR_OPEN_FILES,
                "warning",
                f"open-files limit is {nofile['soft']} (hard {nofile['hard']}): DataLoader workers "
                "share tensors through file descriptors and fail with 'Too many open files'",
                f"Raise it: `ulimit -n {min(max(nofile.get('hard', 65536), NOFILE_MIN), 65536)}` before "
                "the job, or LimitNOFILE in the service; or torch.multiprocessing.set_sharing_strategy("
                "'file_system').",
                evidence=dict(nofile),
            )
        )
    m = env.get("master") or {}
    if m.get("addr") and m.get("error"):
        out.append(
            Finding(
                DOCTOR_MASTER_ADDR,
                "error",
                f"MASTER_ADDR {m['addr']} does not resolve: {m['error']}",
                "Use the master node's IP address or a name every node resolves (check /etc/hosts and "
                "DNS on each node).",
                evidence=dict(m),
            )
        )
    if m.get("port_free") is False:
        out.append(
            Finding(
                DOCTOR_PORT_IN_USE,
                "error",
                f"port {m['port']} on {m['addr']} is already in use on this host: the rendezvous "
                "store cannot listen there",
                f"Choose a free --master-port (or end the job that holds it: `ss -ltnp | grep :{m['port']}`).",
                evidence=dict(m),
            )
        )
    for d in (env.get("gpus") or {}).get("devices", []):
        if d.get("ecc_uncorrected"):
            out.append(
                Finding(
                    DOCTOR_GPU_ECC,
                    "warning",
                    f"GPU {d['index']} ({d['name']}) reports {d['ecc_uncorrected']} uncorrected ECC "
                    "errors since the driver loaded",
                    "Drain the node and run `nvidia-smi -q -d ECC` / DCGM diagnostics; a reset or an "
                    "RMA may be needed.",
                    evidence=dict(d),
                )
            )
    out += frsettings.findings(env.get("flight_recorder") or {})
    if env.get("torch") is None:
        out.append(
            Finding(
                DOCTOR_NO_TORCH,
                "error",
                str(env.get("error", "torch is not importable")),
                "Install PyTorch in this environment.",
            )
        )
    return out
