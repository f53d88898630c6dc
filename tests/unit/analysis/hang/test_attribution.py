"""Culprits, not suspects (issue 25), on hand-built and randomly generated records (pure): which rank's
call is the extra one from the alignment of what followed and the rank tests in the script; suspects
where neither tells; and the verdict invariants: "all ranks diverged" only when no alignment explains one
group's calls as extra, no culprit location outside the user's files, a victim's transport error never
its own failure."""

from __future__ import annotations

import random
from pathlib import Path

from builder import RunBuilder

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.state import is_transport_error
from ddpdoctor.record.reader import load_run

CFG = Config()

# the script the sites point into: the analysis reads its rank tests with ast
SCRIPT = """\
import torch.distributed as dist


def step(rank, x, extra):
    dist.all_reduce(x)
    if rank in extra:
        dist.all_reduce(x)
    dist.barrier()
    dist.all_gather([x, x], x)


def log(x):
    dist.broadcast(x, 0)


def sym(rank, x):
    if rank == 0:
        dist.all_reduce(x)
    else:
        dist.barrier()
"""
COMMON, GUARDED, BARRIER, GATHER, UNGUARDED, SYM_IF, SYM_ELSE = 5, 7, 8, 9, 13, 18, 20
FUNC = {
    COMMON: "step",
    GUARDED: "step",
    BARRIER: "step",
    GATHER: "step",
    UNGUARDED: "log",
    SYM_IF: "sym",
    SYM_ELSE: "sym",
}
OPS = {
    COMMON: "all_reduce",
    GUARDED: "all_reduce",
    BARRIER: "barrier",
    GATHER: "all_gather",
    UNGUARDED: "broadcast",
    SYM_IF: "all_reduce",
    SYM_ELSE: "barrier",
}


class Run:
    """A hand-built run of ``n`` ranks whose sites are lines of SCRIPT."""

    def __init__(self, root: Path, n: int):
        root.mkdir(parents=True, exist_ok=True)
        self.script = root / "train.py"
        self.script.write_text(SCRIPT)
        self.b = RunBuilder(root / "run", script=str(self.script))
        self.n = n
        for r in range(n):
            self.b.add(r, "events.jsonl", "start", 0.0, pid=999999, local_rank=r)
            self.b.add(r, "events.jsonl", "init", 0.1, global_rank=r, world_size=n, backend="gloo")

    def site(self, line: int) -> list:
        return [str(self.script), line, FUNC[line]]

    def call(self, rank: int, seq: int, line: int) -> None:
        shapes = [] if OPS[line] == "barrier" else [[4]]
        self.b.add(
            rank,
            "ledger.jsonl",
            "coll",
            1.0 + seq / 100,
            op=OPS[line],
            group="0",
            seq=[seq, seq],
            shapes=shapes,
            dtypes=["float32"] * len(shapes),
            site=self.site(line),
            t0=1.0,
            t1=1.0,
            err=None,
        )

    def waits(self, rank: int, seq: int, line: int, where: list | None = None) -> None:
        p = {
            "op": OPS[line],
            "group": "0",
            "seq": seq,
            "shapes": [] if OPS[line] == "barrier" else [[4]],
            "dtypes": ["float32"],
            "site": self.site(line),
            "since": 2.0,
        }
        for t in (2.1, 5.0):
            self.b.add(
                rank,
                "heartbeat.jsonl",
                "hb",
                t,
                step=3,
                ncoll=seq,
                seq={"0": seq},
                pending=p,
                where=where or self.site(line),
                in_backward=False,
                in_ddp_forward=False,
            )

    def lost_peer(self, rank: int, seq: int) -> None:
        """The rank raised gloo's transport error (a victim) after issuing ``seq``."""
        self.b.add(
            rank,
            "heartbeat.jsonl",
            "hb",
            2.1,
            step=3,
            ncoll=seq,
            seq={"0": seq},
            pending=None,
            where=["<frozen runpy>", 88, "_run_code"],
            in_backward=False,
            in_ddp_forward=False,
        )
        self.b.add(rank, "events.jsonl", "finish", 5.0, code=1, ddp_fwd=3, ncoll=seq, seq={"0": seq}, exception=True)
        (self.b.root / "ranks" / str(rank) / "error.json").write_text(
            '{"type": "RuntimeError", "message": "[/x/pair.cc:1] Connection closed by peer [127.0.0.1]:1", '
            '"frames": [["<frozen runpy>", 88, "_run_code"]], "user_frame": null}'
        )

    def report(self):
        self.b.add(None, "monitor.jsonl", "verdict", 5.0, mode="certain", reason="x")
        return diagnose(load_run(str(self.b.root)), CFG)


def _prefix(run: Run, k: int) -> None:
    for r in range(run.n):
        for s in range(1, k + 1):
            run.call(r, s, COMMON)


def test_rank_tested_extra_call_met_by_a_barrier_names_rank0_alone(tmp_path):
    run = Run(tmp_path, 2)
    _prefix(run, 4)
    run.call(0, 5, GUARDED)
    run.waits(0, 5, GUARDED)
    run.call(1, 5, BARRIER)
    run.waits(1, 5, BARRIER)
    f = run.report().findings[0]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (0,), f.message
    assert {(l.rank, l.line, l.role) for l in f.locations} >= {
        (0, GUARDED, "diverged"),
        (0, GUARDED - 1, "rank test that led here"),
        (1, BARRIER, "waiting"),
    }
    assert f.evidence["attribution"]["how"] == "rank test"


def test_async_insertion_without_a_rank_test_names_the_rank_with_one_call_more(tmp_path):
    run = Run(tmp_path, 2)
    _prefix(run, 4)
    for s, line in ((5, UNGUARDED), (6, GATHER)):  # rank 0: the extra broadcast, then what rank 1 made at #5
        run.call(0, s, line)
    run.waits(0, 5, UNGUARDED)
    run.call(1, 5, GATHER)
    run.waits(1, 5, GATHER)
    f = run.report().findings[0]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (0,), f.message
    assert f.evidence["attribution"]["how"] == "insertion" and f.evidence["attribution"]["aligned_after"] == 1


def test_symmetric_rank_branches_with_different_ops_are_suspects_not_culprits(tmp_path):
    run = Run(tmp_path, 2)
    _prefix(run, 4)
    run.call(0, 5, SYM_IF)
    run.waits(0, 5, SYM_IF)
    run.call(1, 5, SYM_ELSE)
    run.waits(1, 5, SYM_ELSE)
    f = run.report().findings[0]
    assert f.id == "hang.divergent-collective" and f.culprits == (), f.message
    assert f.evidence["suspects"] == [0, 1] and "suspects: 2 ranks [0,1]" in f.message
    assert {l.role for l in f.locations} == {"suspect"}


def test_later_calls_that_contradict_an_insertion_keep_the_ranks_suspects(tmp_path):
    run = Run(tmp_path, 2)
    _prefix(run, 4)
    run.call(0, 5, UNGUARDED)
    run.call(0, 6, BARRIER)  # not what rank 1 made at #5: no insertion on rank 0
    run.waits(0, 6, BARRIER)
    run.call(1, 5, GATHER)
    run.call(1, 6, GATHER)  # nor on rank 1
    run.waits(1, 6, GATHER)
    f = run.report().findings[0]
    assert f.id == "hang.divergent-collective" and f.culprits == (), f.message


def test_three_ranks_that_all_make_the_rank_tested_call_outvote_nothing(tmp_path):
    # a majority issued the extra call under `if rank in extra:`; the one rank that met it is the victim
    run = Run(tmp_path, 4)
    _prefix(run, 3)
    for r in range(3):
        run.call(r, 4, GUARDED)
        run.waits(r, 4, GUARDED)
    run.call(3, 4, BARRIER)
    run.waits(3, 4, BARRIER)
    f = run.report().findings[0]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (0, 1, 2), f.message


# ---- the verdict invariants over generated records ----


def _oracle_insertion(seqs: dict[int, list[int]], n: int) -> set[int] | None:
    """Independently of the analysis: the ranks whose calls after the divergence are the others' calls
    from the divergence (one call more), when exactly one group of ranks fits."""
    groups: dict[int, list[int]] = {}
    for r, s in seqs.items():
        groups.setdefault(s[0], []).append(r)
    fits = []
    for rs in groups.values():
        others = [o for o in range(n) if o not in rs]
        overlap = [(seqs[r][1:], seqs[o]) for r in rs for o in others]
        if all(
            a and b and [OPS[x] for x in a[: min(len(a), len(b))]] == [OPS[x] for x in b[: min(len(a), len(b))]]
            for a, b in overlap
        ):
            fits.append(set(rs))
    return fits[0] if len(fits) == 1 else None


def test_invariants_over_random_divergences(tmp_path):
    rng = random.Random(25)
    judged = {"culprits": 0, "suspects": 0}
    for i in range(120):
        n = rng.choice([2, 2, 3, 4, 4, 8])
        run = Run(tmp_path / f"r{i}", n)
        k = rng.randint(1, 5)
        _prefix(run, k)
        extra = set(rng.sample(range(n), rng.randint(1, n - 1)))
        guarded = rng.random() < 0.5
        insert_seen = rng.random() < 0.5  # the extra ranks also issued their next (async) call
        line = GUARDED if guarded else UNGUARDED
        nxt = rng.choice([BARRIER, GATHER])
        victims_lost = [r for r in range(n) if r not in extra and rng.random() < 0.3]
        seqs: dict[int, list[int]] = {}
        for r in range(n):
            if r in extra:
                seqs[r] = [line, nxt] if insert_seen else [line]
            else:
                seqs[r] = [nxt]
            for j, ln in enumerate(seqs[r]):
                run.call(r, k + 1 + j, ln)
            if r in victims_lost:
                run.lost_peer(r, k + 1)
            else:
                run.waits(
                    r, k + 1, seqs[r][0], where=["<frozen runpy>", 88, "_run_code"] if rng.random() < 0.3 else None
                )
        report = run.report()
        hang = [f for f in report.findings if f.id.startswith("hang.")]
        assert hang, (i, [f.id for f in report.findings])
        f = hang[0]
        # no culprit location outside the user's files
        for g in report.findings:
            for l in g.locations:
                assert not l.file.startswith("<") and "site-packages" not in l.file, (i, g.id, l)
        for rl in report.ranks:
            assert rl.location is None or not rl.location.file.startswith("<"), (i, rl)
        # a victim's transport error is never its own failure
        rec = load_run(str(run.b.root))
        lost = {r for r in range(n) if is_transport_error(rec.ranks[r].error)}
        assert lost == set(victims_lost)
        for g in report.findings:
            # a lost rank may still be the one whose call diverged, never the one whose failure ended the run
            if g.id.startswith("crash."):
                assert not (lost & set(g.culprits)), (i, g.id, g.culprits, lost, g.message)
            assert not any(l.rank in lost and l.role in ("raised", "ended here") for l in g.locations), (i, g)
        for rl in report.ranks:
            if rl.rank in lost:
                assert "victim" in rl.detail and "raised" not in rl.detail, rl
        # "all ranks diverged" (suspects) only when no alignment explains one group's calls as extra
        explained = _oracle_insertion({r: seqs[r] for r in range(n)}, n)
        if f.id == "hang.divergent-collective":
            judged["suspects"] += 1
            assert not guarded and explained is None, (i, n, sorted(extra), insert_seen, f.message)
            assert f.culprits == () and f.evidence["suspects"]
        else:
            judged["culprits"] += 1
        if guarded or explained is not None:
            assert f.id == "hang.rank-conditional-collective", (i, n, sorted(extra), guarded, f.message)
            assert set(f.culprits) == extra, (i, n, sorted(extra), guarded, insert_seen, f.message)
    assert judged["culprits"] > 40 and judged["suspects"] > 5, judged


def test_invariants_over_random_early_exits_whose_peers_lost_them(tmp_path):
    """Some ranks finish early (their last heartbeat in `<frozen runpy>`, as a module-level script's
    does); the others raise gloo's transport error: the leavers are the culprits, the others victims."""
    rng = random.Random(52)
    for i in range(60):
        n = rng.choice([2, 3, 4, 8])
        run = Run(tmp_path / f"e{i}", n)
        k = rng.randint(2, 6)
        gone = set(rng.sample(range(n), rng.randint(1, n - 1)))
        for r in range(n):
            last = k - 1 if r in gone else k
            for s in range(1, last + 1):
                run.call(r, s, COMMON)
            if r in gone:
                run.b.add(
                    r,
                    "heartbeat.jsonl",
                    "hb",
                    1.5,
                    step=3,
                    ncoll=last,
                    seq={"0": last},
                    pending=None,
                    where=["<frozen runpy>", 88, "_run_code"],
                    in_backward=False,
                    in_ddp_forward=False,
                )
                run.b.add(
                    r, "events.jsonl", "finish", 1.6, code=0, ddp_fwd=3, ncoll=last, seq={"0": last}, exception=False
                )
            else:
                run.lost_peer(r, k)
        run.b.add(None, "monitor.jsonl", "exit", 6.0, returncode=1)
        report = diagnose(load_run(str(run.b.root)), CFG)
        assert report.verdict != "ok", (i, report.findings)
        f = report.findings[0]
        lost = set(range(n)) - gone
        assert set(f.culprits) == gone, (i, n, sorted(gone), f.id, f.culprits, f.message)
        for g in report.findings:
            assert not (lost & set(g.culprits)), (i, g.id, g.culprits)
            for l in g.locations:
                assert not l.file.startswith("<"), (i, g.id, l)
        for rl in report.ranks:
            if rl.rank in lost:
                assert "victim" in rl.detail and "raised" not in rl.detail, rl


def test_half_of_256_ranks_extra_is_named_without_a_majority_and_fast(tmp_path):
    import time

    run = Run(tmp_path, 256)
    _prefix(run, 2)
    for r in range(256):
        line = GUARDED if r % 2 == 0 else BARRIER
        run.call(r, 3, line)
        run.waits(r, 3, line)
    run.b.add(None, "monitor.jsonl", "verdict", 5.0, mode="certain", reason="x")
    record = load_run(str(run.b.root))
    t0 = time.perf_counter()
    f = diagnose(record, CFG).findings[0]
    took = time.perf_counter() - t0
    assert f.id == "hang.rank-conditional-collective" and f.culprits == tuple(range(0, 256, 2)), f.message
    assert f.message.count("128 ranks [0,2,4") == 2, f.message  # who issued what, and who diverged; no more
    assert took < 5.0, took


def test_a_rank_that_leaves_its_routine_is_the_culprit_at_the_line_the_routine_had(tmp_path):
    """FSDP-like: every step all-gathers three times at the forward's line (FWD), then once at backward's
    (BWD) and reduce-scatters (an all_reduce on gloo) there. At step 3 rank 1 skips its last forward
    all-gather, so its backward all-gather meets rank 0's forward one (same op and shapes, another line) and
    the ranks part one call later. Neither insertion nor a rank test tells them apart; the routine of the
    earlier steps does (analysis/hang/attribution.py ``routine``)."""
    fwd, bwd = 6, 9
    ag, ar = "all_gather", "all_reduce"
    step = [(fwd, ag), (fwd, ag), (fwd, ag), (bwd, ag), (bwd, ar)]
    calls = {
        0: step * 3 + [(fwd, ag), (fwd, ag), (fwd, ag), (bwd, ag)],
        1: step * 3 + [(fwd, ag), (fwd, ag), (bwd, ag), (bwd, ar)],
    }
    b = RunBuilder(tmp_path / "run", script="/work/train.py")
    for r, cs in calls.items():
        b.start(r)
        for i, (line, op) in enumerate(cs, 1):
            b.coll(r, i, line, op=op, t=1.0 + i / 100)
        n, (line, op) = len(cs), cs[-1]
        for t in (2.1, 5.0):
            b.hb(r, t, n, pending=dict(pending_at(n, line, op), since=2.0), where=line)
    b.add(None, "monitor.jsonl", "verdict", 5.0, mode="certain", reason="x")
    rep = diagnose(load_run(str(tmp_path / "run")), CFG)
    f = next(x for x in rep.findings if x.id == "hang.rank-conditional-collective")
    assert f.culprits == (1,), f.message
    assert (1, fwd, "skipped here") in {(loc.rank, loc.line, loc.role) for loc in f.locations}
    assert f.evidence["attribution"]["how"] == "routine"
    assert "#18" in f.message  # where rank 1 left the routine, not where the ops first differ (#19)


def pending_at(seq: int, line: int, op: str) -> dict:
    return {
        "op": op,
        "group": "0",
        "seq": seq,
        "shapes": [[4]],
        "dtypes": ["float32"],
        "site": ["/work/train.py", line, "main"],
    }
