"""Long runs (issue 10): the ledger and heartbeat files are rings of bounded size, and a divergence
inside the ring is still found at its line. Real ranks (2, gloo) with small rings set by env vars.

The ledger's rings, its memory map and its running digest are the wrappers' (``DDPDOCTOR_COLLECTIVES=wrappers``,
the fallback that records every call in Python): these jobs force it. Under the default, torch's flight recorder
keeps its own ring (``TORCH_FR_BUFFER_SIZE``), tested at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TESTS, ddpdoctor, finding, marker_line

from ddpdoctor.record import reader, schema
from ddpdoctor.record.writer import prev_path

pytestmark = pytest.mark.extended  # the ledger's rings over long jobs: the extended tier since stop 57

SCRIPT = TESTS / "scripts" / "ring_shift.py"


@pytest.fixture(autouse=True)
def _wrappers(monkeypatch):
    """The wrappers record every call (the ledger these tests read), where the default leaves to torch's
    recorder the calls it records."""
    monkeypatch.setenv("DDPDOCTOR_COLLECTIVES", "wrappers")


def _lines(path: Path) -> int:
    return sum(1 for _ in open(path, "rb")) if path.exists() else 0


def test_ring_bounds_the_files_and_the_divergence_is_still_found(tmp_path, monkeypatch):
    monkeypatch.setenv("DDPDOCTOR_LEDGER_RING", "256")
    monkeypatch.setenv("DDPDOCTOR_HB_RING", "16")
    r = ddpdoctor(["hang", str(SCRIPT)], tmp_path, timeout=120)
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    diverged = [(l["rank"], l["line"]) for l in f["locations"] if l["role"] == "diverged"]
    assert diverged == [(0, marker_line(SCRIPT, "EXTRA"))]
    for rank in (0, 1):
        d = r.run_dir / schema.RANKS_DIR / str(rank)
        ledger = d / schema.LEDGER
        # 2,500 routine collectives (a line each, format 2) went through a ring of 256 (a segment counts 256
        # collectives; an end line would ride uncounted in its segment): rotated, 256 to 2 x 256 lines kept
        assert Path(prev_path(str(ledger))).exists()
        kept = _lines(ledger) + _lines(Path(prev_path(str(ledger))))
        assert 256 <= kept <= 2 * 256, kept
        hb = d / schema.HEARTBEAT
        assert _lines(hb) + _lines(Path(prev_path(str(hb)))) <= 2 * 16
    # the reader sees the ring's last collectives, the newest last, each returned but the barrier it waits in;
    # torch's recorder kept its own ring of the same calls (flight.json, 2,000 entries), merged beside them
    rec = reader.load_run(str(r.run_dir)).ranks[1]
    wrapped = [e for e in rec.ledger if e.get("src") != "flight"]
    assert rec.ledger_trimmed and 256 <= len(wrapped) <= 2 * 256
    assert rec.ledger[-1]["op"] == "barrier" and rec.ledger[-1]["st"] == "issued"
    assert all(e["st"] == "done" for e in rec.ledger[:-1])


KILL_AFTER = TESTS / "scripts" / "kill_after.py"


def test_a_rank_killed_after_a_collective_returned_did_not_die_inside_it(tmp_path):
    """Format 2: a routine collective is one ledger line, copied into a memory map of the file. A rank
    SIGKILLed just after its last all_reduce returned leaves the map untrimmed (NUL bytes after its
    lines) and no end line: the reader still reads every line, and the counters say the last call
    returned, so the rank is not reported as dead inside it; the rank it left waiting is."""
    r = ddpdoctor(["hang", str(KILL_AFTER)], tmp_path, timeout=120)
    assert r.code == 1, r.err[-2000:]
    f = finding(r.report, "crash.abnormal-exit")
    assert f["culprits"] == [1] and "rank 1: ended without finishing (killed by SIGKILL)" in f["message"]
    assert json.loads((r.run_dir / schema.MANIFEST).read_text())["version"] == schema.VERSION == 2
    raw = (r.run_dir / schema.RANKS_DIR / "1" / schema.LEDGER).read_bytes()
    assert raw.count(b"\n") == 20 and raw.endswith(b"\0")  # killed: never trimmed
    rec = reader.load_run(str(r.run_dir))
    killed, waiting = rec.ranks[1].ledger, rec.ranks[0].ledger
    assert [e["seq"][0] for e in killed] == list(range(1, 21))
    assert all(e["st"] == "done" and e["site"][1] == marker_line(KILL_AFTER, "ROUTINE") for e in killed)
    # rank 0's barrier never returned: still issued, or raised when gloo saw the peer's socket close
    assert waiting[-1]["op"] == "barrier" and waiting[-1]["st"] in ("issued", "error")
    assert waiting[-1]["site"][1] == marker_line(KILL_AFTER, "WAITS")
    assert all(e["st"] == "done" for e in waiting[:-1])


def _ring_ledger(run: Path, rank: int, positions: list[tuple[int, int]], split: int) -> None:
    """Write (position, line) collectives as a rotated ring: those before ``split`` in the .prev segment."""
    d = run / schema.RANKS_DIR / str(rank)
    d.mkdir(parents=True, exist_ok=True)
    for name, part in (
        (prev_path(str(d / schema.LEDGER)), [p for p in positions if p[0] < split]),
        (str(d / schema.LEDGER), [p for p in positions if p[0] >= split]),
    ):
        with open(name, "w") as f:
            for seq, line in part:
                t = 1.0 + seq * 0.001
                f.write(
                    json.dumps(
                        {
                            "v": 1,
                            "kind": "coll",
                            "rank": rank,
                            "t": t,
                            "op": "all_reduce",
                            "group": "0",
                            "seq": [seq, seq],
                            "shapes": [[4]],
                            "dtypes": ["float32"],
                            "site": ["/work/train.py", line, "main"],
                            "st": "issued",
                        }
                    )
                    + "\n"
                )
                f.write(
                    json.dumps(
                        {
                            "v": 1,
                            "kind": "cend",
                            "rank": rank,
                            "t": t + 0.0005,
                            "group": "0",
                            "s0": seq,
                            "s1": seq,
                            "async": False,
                        }
                    )
                    + "\n"
                )


def test_rings_rotated_at_different_points_still_give_the_extra_call(tmp_path):
    """Rank 0 made one extra all_reduce (line 22) at position 290, inside both rings; the rings start at
    different positions (100 and 150: older collectives rotated away). The divergence is found at 290 on
    rank 0's line, not at the ring edges, where one rank's rotated-away collectives look like gaps."""
    from builder import RunBuilder, pending

    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.config import Config

    run = tmp_path / "run"
    b = RunBuilder(run).start(0).start(1)
    r0 = [(s, 22 if s == 290 else 20) for s in range(100, 301)]
    r1 = [(s, 20) for s in range(150, 301)]
    _ring_ledger(run, 0, r0, 200)
    _ring_ledger(run, 1, r1, 220)
    b.hb(0, 1.5, 301, pending("all_reduce", 301, 20, 1.4)).hb(0, 9.0, 301, pending("all_reduce", 301, 20, 1.4))
    b.hb(1, 1.5, 301, pending("barrier", 301, 30, 1.4, shapes=())).hb(
        1, 9.0, 301, pending("barrier", 301, 30, 1.4, shapes=())
    )
    b.add(None, "monitor.jsonl", "verdict", 9.0, mode="certain", reason="x")
    rec = reader.load_run(str(run))
    assert rec.ranks[0].ledger_trimmed and rec.ranks[1].ledger_trimmed
    report = diagnose(rec, Config(timeout=10.0))
    f = next(f for f in report.findings if f.id == "hang.rank-conditional-collective")
    assert f.culprits == (0,)
    assert [(loc.rank, loc.line) for loc in f.locations if loc.role == "diverged"] == [(0, 22)]
    assert f.evidence["divergence"]["seq"] == 290


DIGEST_SCRIPT = TESTS / "scripts" / "digest_shift.py"


def test_running_digest_sees_a_divergence_before_the_ring(tmp_path, monkeypatch):
    """Heartbeats and finish events carry per group [count, digest] now and at the ring's start; healthy
    ranks agree, and the analysis folded over the kept ledger reaches the rank's own digest. When rank 0
    made one extra call long before the ring (16 kept), the hang finding's culprit comes from the window,
    but the digests at the window's start differ and the note says the sequences differed before it."""
    from ddpdoctor.analysis.hang import digest

    monkeypatch.setenv("DDPDOCTOR_LEDGER_RING", "16")
    ok = ddpdoctor(["hang", str(DIGEST_SCRIPT)], tmp_path, timeout=120)
    assert ok.code in (0, 1), ok.err[-2000:]  # 1: the documented gloo teardown abort at most
    rec = reader.load_run(str(ok.run_dir))
    fins = {r: rec.ranks[r].event(schema.K_FINISH) for r in (0, 1)}
    assert fins[0]["digest"] == fins[1]["digest"] and fins[0]["digest"]["0"][0] == 121  # 120 + barrier
    assert fins[0]["digest0"] == fins[1]["digest0"] and 0 < fins[0]["digest0"]["0"][0] < 121
    assert rec.ranks[0].last_hb["digest"] == fins[0]["digest"]
    (c0, d0), (cn, dn) = fins[1]["digest0"]["0"], fins[1]["digest"]["0"]
    kept = [e for e in rec.ranks[1].ledger if e.get("group") == "0" and e.get("src") != "flight"]  # the wrappers' ring
    assert rec.ranks[1].ledger_trimmed and c0 + len(kept) == cn
    assert digest._at(c0, d0, kept, cn) == dn  # the rank's hash and the analysis's agree
    assert digest.before_window(rec) is None

    bad = ddpdoctor(["hang", str(DIGEST_SCRIPT), "--extra"], tmp_path, timeout=120)
    assert bad.code == 3, bad.err[-2000:]
    rec = reader.load_run(str(bad.run_dir))
    info = digest.before_window(rec)
    assert info is not None and info["group"] == "0" and 0 < info["kept"] <= 2 * 16
    assert sorted(info["digests"].values()) == [[0], [1]]
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.config import Config

    findings = digest.annotate(diagnose(rec, Config()).findings, rec)
    hang = next(f for f in findings if f.id.startswith("hang."))
    assert "already differed before the last" in hang.message and "DDPDOCTOR_LEDGER_RING" in hang.message
    assert hang.evidence["before_window"] == info


def test_the_call_line_cache_records_every_call_as_made(tmp_path):
    """The collective wrapper prepares a call line's ledger text once (shapes, dtypes, group): calls
    from one line with other shapes, dtypes or groups are all recorded as made."""
    script = TESTS / "scripts" / "site_cache.py"
    r = ddpdoctor(["hang", str(script)], tmp_path, timeout=120)
    assert r.code == 0, r.out + r.err[-2000:]
    line = marker_line(script, "CALL")
    for rank in (0, 1):
        rec = reader.load_run(str(r.run_dir)).ranks[rank]
        got = [(e["op"], e["shapes"], e["dtypes"], e["site"][1] if e.get("site") else None) for e in rec.ledger]
        assert got == [
            ("all_reduce", [[2]], ["float32"], line),
            ("all_reduce", [[3]], ["float32"], line),
            ("all_reduce", [[2]], ["float32"], line),
            ("all_reduce", [[2, 2]], ["float32"], line),
            ("all_reduce", [[2]], ["int64"], line),
            ("all_reduce", [[4]], ["float32"], line),
            ("all_reduce", [[4]], ["float32"], line),
            ("all_reduce", [[5]], ["float32"], line),
            ("barrier", [], [], line + 12),
        ], got
        groups = [e["group"] for e in rec.ledger]
        assert groups[5] != groups[4] == groups[6], groups  # the subgroup is its own
        seqs = [tuple(e["seq"]) for e in rec.ledger]
        assert [s for s, g in zip(seqs, groups) if g == groups[0]] == [(i, i) for i in range(1, 9)], seqs
        assert seqs[5] == (1, 1), seqs
        assert all(e["st"] == "done" for e in rec.ledger)


def test_under_the_default_a_divergence_before_torchs_ring_is_said_to_be_out_of_sight(tmp_path, monkeypatch):
    """The default leaves the calls to torch's flight recorder: with a ring of 16 entries and 120 calls in a few
    milliseconds, the rank's reads of the ring (a beat every 0.25 s) see none of the chunks before it, and rank
    0's extra call at step 5 is out of sight. The hang finding says where the ring starts and how to keep more,
    rather than read as if the window were the whole run; with the ring of the default size (2,000) the same
    job names the extra call itself."""
    monkeypatch.delenv("DDPDOCTOR_COLLECTIVES")
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "16")
    bad = ddpdoctor(["hang", str(DIGEST_SCRIPT), "--extra"], tmp_path, timeout=120)
    assert bad.code == 3, bad.err[-2000:]
    hang = next(f for f in bad.report["findings"] if f["id"].startswith("hang."))
    assert "holds group 0's calls from #" in hang["message"] and "TORCH_FR_BUFFER_SIZE" in hang["message"]
    assert hang["evidence"]["recorder_window"]["unread"] == [1, 4]  # chunk 0: no read saw it
    assert hang["evidence"]["recorder_window"]["group"] == "0"
    assert hang["evidence"]["recorder_window"]["first"] > 100

    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE")
    whole = ddpdoctor(["hang", str(DIGEST_SCRIPT), "--extra"], tmp_path, timeout=120)
    assert whole.code == 3, whole.err[-2000:]
    f = finding(whole.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0]
    assert (0, marker_line(DIGEST_SCRIPT, "EXTRA")) in [(l["rank"], l["line"]) for l in f["locations"]]
    assert "recorder_window" not in f["evidence"]


def test_the_recorders_chunks_name_an_extra_call_before_its_ring(tmp_path, monkeypatch):
    """Under the default the rank's heartbeat reads torch's ring (64 entries here) a chunk's worth of calls apart
    and keeps each whole chunk's digest and per-line counts (rank/flight.py ``Chunks``). A job paced so that the
    reads keep up: healthy, every chunk before the ring is read on both ranks and they agree; with rank 0's extra
    call at step 5, long out of the ring by the end, the hang reads as that call, culprit rank 0 at its line,
    where the window alone blames rank 1 for leaving the loop."""
    from ddpdoctor.analysis.hang import digest

    monkeypatch.delenv("DDPDOCTOR_COLLECTIVES")
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "64")
    ok = ddpdoctor(["hang", str(DIGEST_SCRIPT), "--pace", "0.1"], tmp_path, timeout=120)
    assert ok.code in (0, 1), ok.err[-2000:]  # 1: the documented gloo teardown abort at most
    rec = reader.load_run(str(ok.run_dir))
    chunks = [rec.ranks[r].flight["chunks"] for r in (0, 1)]
    held = [c["groups"]["0"] for c in chunks]
    assert chunks[0]["size"] == chunks[1]["size"] == 16
    both = set(held[0]) & set(held[1])
    assert {"0", "4", "5", "6"} <= both  # the first read's chunk, and the end's (positions 58-121 held then)
    assert {k: held[0][k] for k in both} == {k: held[1][k] for k in both}  # the same calls: the same chunks
    assert all(rec.ranks[r].flight["first_record"] > 0 for r in (0, 1))  # the ring wrapped
    # every chunk read on both ranks where the reads kept up (a quiet host: 7 of 7); where a read waited past its
    # chunk (the reads' CPU share spent, a loaded host), that chunk is named unread: never a divergence
    got = digest.recorder_window(rec)
    assert got is None or (got[0] == "recorder_window" and got[1]["unread"]), got

    bad = ddpdoctor(["hang", str(DIGEST_SCRIPT), "--extra", "--pace", "0.1"], tmp_path, timeout=120)
    assert bad.code == 3, bad.err[-2000:]
    f = finding(bad.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0]
    assert f["locations"][0]["rank"] == 0 and f["locations"][0]["line"] == marker_line(DIGEST_SCRIPT, "EXTRA")
    info = f["evidence"]["before_ring"]
    assert (info["group"], info["from"], info["to"]) == ("0", 1, 16)  # chunk 0: the extra call is #7
    assert info["first"] > 16
