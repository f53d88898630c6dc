"""Hand-built run directories for testing the pure layers (reader, analysis, renderers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class RunBuilder:
    def __init__(self, root: Path, script: str = "/work/train.py", **manifest: Any) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        m = {
            "schema": "ddpdoctor.run",
            "version": 1,
            "command": "hang",
            "mode": "torchrun",
            "script": script,
            "timeout": 60.0,
        }
        m.update(manifest)
        (root / "manifest.json").write_text(json.dumps(m))

    def add(self, rank: int | None, file: str, kind: str, t: float, **fields: Any) -> RunBuilder:
        path = self.root / file if rank is None else self.root / "ranks" / str(rank) / file
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps({"v": 1, "kind": kind, "rank": rank, "t": t, **fields}) + "\n")
        return self

    def census(self, rank: int, t: float, step: int, **fields: Any) -> RunBuilder:
        """One memleak census line: a small flat process unless ``fields`` say otherwise."""
        base: dict[str, Any] = {
            "objects": 1000,
            "tensors": 10,
            "graph_nodes": 0,
            "tensor_bytes": {"cpu": 4096},
            "groups": [],
            "biggest_graphs": [],
            "group_holders": {},
            "workers": {},
        }
        return self.add(rank, "memory.jsonl", "census", t, step=step, **{**base, **fields})

    def start(self, rank: int, t: float = 0.0) -> RunBuilder:
        self.add(rank, "events.jsonl", "start", t, pid=999999, local_rank=rank)
        return self.add(rank, "events.jsonl", "init", t + 0.1, global_rank=rank, world_size=2, backend="gloo")

    def hb(self, rank: int, t: float, seq: int, pending: dict | None = None, where: int = 10, **kw: Any) -> RunBuilder:
        return self.add(
            rank,
            "heartbeat.jsonl",
            "hb",
            t,
            step=kw.pop("step", 3),
            ncoll=seq,
            seq={"0": seq},
            pending=pending,
            where=["/work/train.py", where, "main"],
            **{"in_backward": False, "in_ddp_forward": False, **kw},
        )

    def coll(
        self, rank: int, seq: int, line: int, op: str = "all_reduce", shapes=((4,),), t: float = 1.0
    ) -> RunBuilder:
        return self.add(
            rank,
            "ledger.jsonl",
            "coll",
            t,
            op=op,
            group="0",
            seq=[seq, seq],
            shapes=[list(s) for s in shapes],
            dtypes=["float32"] * len(shapes),
            site=["/work/train.py", line, "main"],
            t0=t,
            t1=t,
            err=None,
        )

    def finish(self, rank: int, t: float, code: int = 0, seq: int = 0, **kw: Any) -> RunBuilder:
        return self.add(
            rank,
            "events.jsonl",
            "finish",
            t,
            code=code,
            ddp_fwd=3,
            ncoll=seq,
            seq={"0": seq},
            **{"exception": False, **kw},
        )


def pending(op: str, seq: int, line: int, since: float, shapes=((4,),)) -> dict:
    return {
        "op": op,
        "group": "0",
        "seq": seq,
        "shapes": [list(s) for s in shapes],
        "dtypes": ["float32"],
        "site": ["/work/train.py", line, "main"],
        "since": since,
    }
