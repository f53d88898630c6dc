"""The node's environment judged (health/env.py): a healthy environment gives nothing; a socket
interface name that does not exist, a small /dev/shm, a low open-files limit, a MASTER_ADDR that does not
resolve, a port in use, GPU ECC errors and a missing torch are each their finding."""

from __future__ import annotations

import socket
from typing import Any

from ddpdoctor.health.env import _ifname_missing, _port_free, _resolve, findings, usable

IFS = {
    "lo": {"up": True, "ipv4": ["127.0.0.1"], "ipv6": ["::1"]},
    "eth0": {"up": True, "ipv4": ["10.0.0.5"], "ipv6": []},
    "ib0": {"up": False, "ipv4": ["10.1.0.5"], "ipv6": []},
    "docker0": {"up": True, "ipv4": [], "ipv6": []},
}


def _env(**kw: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": "2.13.0",
        "interfaces": IFS,
        "socket_ifname": {},
        "shm": {"total_bytes": 8 * 2**30, "free_bytes": 8 * 2**30},
        "open_files": {"soft": 65536, "hard": 65536},
        "master": {"addr": None, "port": None},
        "gpus": {"devices": []},
        "flight_recorder": {},
    }
    env.update(kw)
    return env


def _ids(env: dict[str, Any], backend: str = "gloo") -> list[str]:
    return [f.id for f in findings(env, backend)]


def test_a_healthy_environment_has_no_findings() -> None:
    assert findings(_env(socket_ifname={"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "^docker"}), "gloo") == []


def test_usable_interfaces_are_up_with_an_address_loopback_last() -> None:
    assert usable(_env()) == ["eth0", "lo"]


def test_interface_name_rules_of_gloo_and_nccl() -> None:
    names = set(IFS)
    assert _ifname_missing("eth0,eth1", names, nccl=False) == ["eth1"]
    assert _ifname_missing("eth", names, nccl=False) == ["eth"]  # gloo: exact names
    assert _ifname_missing("eth", names, nccl=True) == []  # nccl: prefixes
    assert _ifname_missing("=eth", names, nccl=True) == ["eth"]
    assert _ifname_missing("^lo,docker", names, nccl=True) == []


def test_a_missing_interface_is_an_error_for_the_backend_in_use_and_a_warning_otherwise() -> None:
    env = _env(socket_ifname={"GLOO_SOCKET_IFNAME": "eth7"})
    (f,) = findings(env, "gloo")
    assert f.id == "doctor.socket-ifname" and f.severity == "error"
    assert f.message == "GLOO_SOCKET_IFNAME=eth7 names an interface this host does not have: eth7"
    assert "(here: eth0, lo)" in f.hint
    (w,) = findings(env, "nccl")
    assert w.severity == "warning" and w.message.endswith("(not used by the nccl backend of this run)")


def test_an_interface_that_is_down_is_named() -> None:
    (f,) = findings(_env(socket_ifname={"NCCL_SOCKET_IFNAME": "=ib0"}), "nccl")
    assert f.severity == "error" and f.message == "NCCL_SOCKET_IFNAME==ib0: interface ib0 is down"


def test_small_shm_and_low_open_files_are_warnings_with_their_numbers() -> None:
    env = _env(shm={"total_bytes": 64 * 2**20, "free_bytes": 0}, open_files={"soft": 1024, "hard": 4096})
    shm, nofile = findings(env, "gloo")
    assert shm.id == "doctor.shm-small" and shm.message.startswith("/dev/shm is 64 MiB")
    assert nofile.id == "doctor.open-files" and nofile.message.startswith("open-files limit is 1024 (hard 4096)")
    assert "`ulimit -n 4096`" in nofile.hint


def test_master_address_and_port_problems_are_errors() -> None:
    env = _env(master={"addr": "nohost.invalid", "port": 29500, "error": "Name or service not known"})
    (f,) = findings(env, "gloo")
    assert (
        f.id == "doctor.master-addr"
        and f.message == "MASTER_ADDR nohost.invalid does not resolve: Name or service not known"
    )
    (p,) = findings(_env(master={"addr": "127.0.0.1", "port": 29500, "port_free": False}), "gloo")
    assert p.id == "doctor.port-in-use" and "`ss -ltnp | grep :29500`" in p.hint


def test_gpu_ecc_errors_and_no_torch() -> None:
    env = _env(gpus={"devices": [{"index": 1, "name": "H100", "ecc_uncorrected": 3}, {"index": 0, "name": "H100"}]})
    (f,) = findings(env, "nccl")
    assert f.id == "doctor.gpu-ecc" and f.message.startswith("GPU 1 (H100) reports 3 uncorrected ECC errors")
    assert _ids(_env(torch=None, error="cannot import torch: boom")) == ["doctor.no-torch"]


def test_a_port_someone_listens_on_is_not_free_and_localhost_resolves() -> None:
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        assert _port_free(s.getsockname()[1]) is False
    r = _resolve("127.0.0.1")
    assert r["error"] is None and "127.0.0.1" in r["addresses"]
