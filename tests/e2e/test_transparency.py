"""The script under ddpdoctor cannot tell: same argv, sys.path[0], __name__, __file__ and environment
as under plain torchrun, and its output reaches the user."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import TOKEN_VAR, ddpdoctor, seen

SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
# batched p2p, as pipeline-parallel code makes it: torch checks a P2POp's function by identity with its own
peer = 1 - dist.get_rank()
ops = [dist.P2POp(dist.isend, torch.ones(2), peer), dist.P2POp(dist.irecv, torch.empty(2), peer)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
same = [getattr(dist, n) is getattr(dist.distributed_c10d, n) for n in ("isend", "irecv")]
# one write() per line: two ranks share plain torchrun's stdout
sys.stdout.write("SEEN " + json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__, "file": __file__,
                 "env": sorted(os.environ), "rank": os.environ["RANK"], "world": os.environ["WORLD_SIZE"],
                 "same": same}) + "\\n")
# a barrier before the teardown: with no collective at all, one rank can tear down while the other is still
# in gloo's connection setup ("Connection closed by peer" once under plain torchrun, on a loaded host)
dist.barrier()
dist.destroy_process_group()
"""

# set per launch by torchrun itself (a fresh id, port or temp file each time)
PER_LAUNCH = set()


def test_script_sees_what_plain_torchrun_gives_it(tmp_path):
    (tmp_path / "pkg").mkdir()
    script = tmp_path / "pkg" / "show.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    bare = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "pkg/show.py",
            "a",
            "--flag",
            "x y",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bare.returncode == 0, bare.stderr[-2000:]
    r = ddpdoctor(["hang", "pkg/show.py", "a", "--flag", "x y"], tmp_path)
    assert r.code == 0, r.err[-2000:]
    plain, ours = seen(bare.stdout), seen(r.out)
    assert set(plain) == set(ours) == {"0", "1"}
    for rank in plain:
        p, o = plain[rank], ours[rank]
        assert o["argv"] == p["argv"] == ["pkg/show.py", "a", "--flag", "x y"]
        assert o["path0"] == p["path0"] == str(tmp_path / "pkg")
        assert o["name"] == p["name"] == "__main__"
        assert o["file"] == p["file"]
        assert set(o["env"]) - {TOKEN_VAR} == set(p["env"]), set(o["env"]) ^ set(p["env"])
        assert o["world"] == p["world"] == "2"
        # the names torch compares by identity (isend, irecv) are one object in dist and in its module, as bare
        assert o["same"] == p["same"] == [True, True], (o["same"], p["same"])


MODULE_SCRIPT = """
import copy, io, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
model = DDP(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ema = copy.deepcopy(model.module)            # an EMA copy, as many training scripts keep
for step in range(3):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
buf = io.BytesIO()
torch.save(model.module, buf)                # the whole module, pickled
buf.seek(0)
back = torch.load(buf, weights_only=False)
hooks = [len(m._forward_pre_hooks) + len(m._forward_hooks) for m in (model.module, ema, back)]
sys.stdout.write(f"MODULE hooks={hooks} saved={buf.getbuffer().nbytes > 0}\\n")
dist.destroy_process_group()
"""


def test_the_users_module_is_left_as_it_is_under_check(tmp_path):
    """check fingerprints after DDP's buffer sync without adding anything to the user's module: a hook there
    made ``torch.save(model.module)`` fail (a local function cannot be pickled) and rode along in
    ``copy.deepcopy`` copies. The script pickles the whole module, keeps a deep copy, and sees no hooks;
    the run is OK and the fingerprints were still taken."""
    script = tmp_path / "train.py"
    script.write_text(MODULE_SCRIPT)
    r = ddpdoctor(["check", str(script)], tmp_path)
    assert r.code == 0, r.err[-2000:]
    assert r.out.count("MODULE hooks=[0, 0, 0] saved=True") == 2
    # teardown.gloo-abort is torch 2.13's own abort of a finished rank at exit (~6 % of clean gloo runs),
    # classified by ddpdoctor and not about the user's module
    assert [
        f["id"]
        for f in r.report["findings"]
        if f["severity"] in ("error", "warning") and f["id"] != "teardown.gloo-abort"
    ] == []
    for rank in (0, 1):
        fps = [json.loads(l) for l in (r.run_dir / "ranks" / str(rank) / "fingerprints.jsonl").read_text().splitlines()]
        assert [(f["where"], f["step"]) for f in fps] == [("ddp-init", 0), ("forward", 1)]
