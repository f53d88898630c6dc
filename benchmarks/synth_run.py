"""Write a synthetic multi-node job of ddpdoctor run directories for scale tests (``--format 2``, the
default: one ledger line per routine collective, as ranks write since stop 11; ``--format 1``: a ``coll``
and a ``cend`` line per collective, as before).

One run directory per node, ``--ranks-per-node`` ranks each (global ranks, as torchrun numbers them).
Every rank makes ``--colls`` metric all_reduces from one line of a small script; one rank (``--culprit``,
default the middle rank) makes one extra all_reduce 50 collectives before the end (a rank-conditional
collective): the others end up waiting in the final barrier, the culprit in its last all_reduce. The
expected diagnosis is hang.rank-conditional-collective naming the culprit and the EXTRA line.

    python benchmarks/synth_run.py --nodes 128 --out /tmp/job     # 1,024 ranks
    ddpdoctor analyze /tmp/job/node*
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil

SCRIPT = """import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    metric = torch.zeros(1)
    for step in range(STEPS):
        dist.all_reduce(metric)  # REGULAR
        if rank == CULPRIT and step == STEPS - 50:
            dist.all_reduce(metric)  # EXTRA
    dist.barrier()  # END
"""
REGULAR, EXTRA, END = 10, 12, 13
T0 = 1_800_000_000.0
STEP_S = 0.003  # one collective every 3 ms
HB_S = 0.25


def _w(path: str, lines: list[str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(lines))


def _coll(rank: int, op: str, seq: int, line: int, t: float, script: str, shapes: str, fmt: int = 2) -> list[str]:
    coll = (
        f'{{"v":1,"kind":"coll","rank":{rank},"t":{t!r},"op":"{op}","group":"0","seq":[{seq},{seq}],'
        f'"shapes":{shapes},"dtypes":["float32"],"site":[{json.dumps(script)},{line},"main"],'
        f'"st":"issued"}}\n'
    )
    if fmt >= 2:  # a routine call's return is implied by the next line (and the counters for the last)
        return [coll]
    return [
        coll,
        f'{{"v":1,"kind":"cend","rank":{rank},"t":{t + 0.0004!r},"group":"0","s0":{seq},"s1":{seq},"async":false}}\n',
    ]


def write_rank(
    d: str, rank: int, local: int, world: int, colls: int, culprit: int, script: str, host: str, fmt: int = 2
) -> None:
    os.makedirs(d, mode=0o700, exist_ok=True)
    _w(
        os.path.join(d, "events.jsonl"),
        [
            json.dumps(
                {
                    "v": 1,
                    "kind": "start",
                    "rank": rank,
                    "t": T0,
                    "pid": 10000 + rank,
                    "local_rank": local,
                    "host": host,
                    "script": script,
                    "world_size": world,
                }
            )
            + "\n",
            json.dumps(
                {
                    "v": 1,
                    "kind": "init",
                    "rank": rank,
                    "t": T0 + 1,
                    "global_rank": rank,
                    "world_size": world,
                    "backend": "gloo",
                    "site": [script, 6, "main"],
                    "frameworks": [],
                }
            )
            + "\n",
        ],
    )
    ledger: list[str] = []
    rnd = random.Random(rank)
    seq, t = 0, T0 + 2 + rnd.random() * 0.002  # each rank's clock and pace differ by a little
    for step in range(colls):
        seq += 1
        ledger += _coll(rank, "all_reduce", seq, REGULAR, t, script, "[[1]]", fmt)
        t += STEP_S * (0.9 + 0.2 * rnd.random())
        if rank == culprit and step == colls - 50:
            seq += 1
            ledger += _coll(rank, "all_reduce", seq, EXTRA, t, script, "[[1]]", fmt)
            t += STEP_S
    # the last call never returns: the culprit's shifted all_reduce meets the others' barrier
    if rank == culprit:
        if fmt < 2:
            ledger.pop()  # its last all_reduce is still pending (no cend)
        pend_op, pend_line, shapes, seq_p = "all_reduce", REGULAR, [[1]], seq
    else:
        seq += 1
        ledger += _coll(rank, "barrier", seq, END, t, script, "[]", 1)[:1]
        pend_op, pend_line, shapes, seq_p = "barrier", END, [], seq
    since = t
    end_t = since + 8.0
    hbs: list[str] = []
    n_hb = int((end_t - T0 - 2) / HB_S)
    for i in range(n_hb):
        ht = T0 + 2 + i * HB_S
        done = min(seq_p, int((ht - T0 - 2) / STEP_S))
        pending = None
        if ht >= since:
            done = seq_p
            pending = {
                "op": pend_op,
                "group": "0",
                "seq": seq_p,
                "shapes": shapes,
                "dtypes": ["float32"],
                "site": [script, pend_line, "main"],
                "since": since,
            }
        hbs.append(
            json.dumps(
                {
                    "v": 1,
                    "kind": "hb",
                    "rank": rank,
                    "t": ht,
                    "step": 0,
                    "ncoll": done,
                    "seq": {"0": done},
                    "pending": pending,
                    "awaiting": None,
                    "where": [script, pend_line if pending else REGULAR, "main"],
                    "in_backward": False,
                    "in_ddp_forward": False,
                    "final": None,
                    "cpu": round(1 + 0.8 * (ht - T0) if not pending else 1 + 0.8 * (since - T0), 3),
                },
                separators=(",", ":"),
            )
            + "\n"
        )
    _w(os.path.join(d, "heartbeat.jsonl"), hbs)
    _w(os.path.join(d, "ledger.jsonl"), ledger)
    # the last routine call that returned: the one before the pending one
    _w(os.path.join(d, "counters.json"), [json.dumps({"ddp_fwd": 0, "ncoll": seq_p - 1, "ended": ["0", seq_p - 1]})])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--colls", type=int, default=2000)
    ap.add_argument("--culprit", type=int, default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--format", type=int, choices=(1, 2), default=2, help="run-directory format version")
    a = ap.parse_args()
    world = a.nodes * a.ranks_per_node
    culprit = world // 2 if a.culprit is None else a.culprit
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out, mode=0o700)
    script = os.path.abspath(os.path.join(a.out, "train.py"))
    _w(script, [SCRIPT.replace("STEPS", str(a.colls)).replace("CULPRIT", str(culprit))])
    for n in range(a.nodes):
        nd = os.path.join(a.out, f"node{n:05d}")
        os.makedirs(os.path.join(nd, "ranks"), mode=0o700)
        _w(
            os.path.join(nd, "manifest.json"),
            [
                json.dumps(
                    {
                        "schema": "ddpdoctor.run",
                        "version": a.format,
                        "ddpdoctor": "0.1.0",
                        "created": T0,
                        "host": f"node{n}",
                        "command": "hang",
                        "mode": "torchrun",
                        "script": script,
                        "script_args": [],
                        "timeout": 60.0,
                        "heartbeat_s": HB_S,
                        "nnodes": a.nodes,
                        "node_rank": n,
                        "nproc_per_node": a.ranks_per_node,
                    },
                    indent=1,
                )
            ],
        )
        end = T0 + 2 + (a.colls + 1) * STEP_S + 8.0
        _w(
            os.path.join(nd, "monitor.jsonl"),
            [
                json.dumps({"v": 1, "kind": "spawned", "rank": None, "t": T0, "pid": 9000 + n, "cmd": []}) + "\n",
                json.dumps(
                    {"v": 1, "kind": "verdict", "rank": None, "t": end, "mode": "certain", "reason": "synthetic"}
                )
                + "\n",
                json.dumps({"v": 1, "kind": "kill", "rank": None, "t": end + 0.2, "reason": "verdict"}) + "\n",
                json.dumps({"v": 1, "kind": "exit", "rank": None, "t": end + 1.0, "returncode": -15}) + "\n",
            ],
        )
        for lr in range(a.ranks_per_node):
            r = n * a.ranks_per_node + lr
            write_rank(os.path.join(nd, "ranks", str(r)), r, lr, world, a.colls, culprit, script, f"node{n}", a.format)
    print(
        f"{a.out}: {a.nodes} node dirs x {a.ranks_per_node} ranks = {world} ranks, culprit rank {culprit} "
        f"at {script}:{EXTRA}"
    )


if __name__ == "__main__":
    main()
