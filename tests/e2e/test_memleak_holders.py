"""memleak on trainer-style scripts (real torchrun ranks, default settings): the holder is found from what
grows, even when no frame of the user's code names it (a trainer driven by a library's loop, a hook of a
trainer class); the rank set is exactly the ranks that leak; the healthy variants stay clean."""

from __future__ import annotations

from helpers import ROOT, ddpdoctor, finding, marker_line, needs, script_argv

SCRIPTS = ROOT / "tests" / "scripts" / "memleak"
needs_transformers = needs("transformers")


def _memleak(tmp_path, name, *args, timeout=150):
    return ddpdoctor(script_argv("memleak", str(SCRIPTS / name), *(("--", *args) if args else ())), tmp_path, timeout)


def _errors(r):
    return [(f["id"], f["message"]) for f in r.report["findings"] if f["severity"] == "error"]


def test_a_trainer_hook_keeping_logits_on_rank_0_names_the_attribute_and_the_hook(tmp_path):
    r = _memleak(tmp_path, "trainer_hook_logits.py")
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "memleak.autograd-graph")
    line = marker_line(SCRIPTS / "trainer_hook_logits.py", "LEAK")
    assert f["culprits"] == [0] and f["ranks"] == [0], f
    assert [(l["rank"], l["line"], l["function"]) for l in f["locations"]] == [(0, line, "on_train_batch_end")]
    assert "`self._epoch_logits` (MiniTrainer.on_train_batch_end, trainer_hook_logits.py:" in f["message"]
    assert "on only rank(s) [0] of 2" in f["message"] and "others stay flat" in f["message"]
    assert "memleak.rss" not in [x["id"] for x in r.report["findings"]]


def test_the_same_trainer_keeping_detached_logits_is_clean(tmp_path):
    r = _memleak(tmp_path, "trainer_hook_logits.py", "--detach")
    assert r.code == 0 and _errors(r) == [], r.out


def test_a_history_of_losses_on_every_rank_in_a_1ms_loop_names_both_ranks(tmp_path):
    r = _memleak(tmp_path, "trainer_history.py")
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "memleak.autograd-graph")
    line = marker_line(SCRIPTS / "trainer_history.py", "LEAK")
    assert f["culprits"] == [0, 1] and "every rank" in f["message"] and "rank-conditional" not in f["message"]
    assert {(l["rank"], l["line"]) for l in f["locations"]} == {(0, line), (1, line)}
    assert "`self.history` (Trainer.step," in f["message"]


@needs_transformers
def test_a_hugging_face_trainer_subclass_keeping_losses_is_named_at_its_line(tmp_path):
    """`SmoothingTrainer(...).train()`: the trainer is a temporary; only the library's loop names it."""
    r = _memleak(tmp_path, "hf_trainer_recent_losses.py", timeout=240)
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "memleak.autograd-graph")
    line = marker_line(SCRIPTS / "hf_trainer_recent_losses.py", "LEAK")
    assert f["culprits"] == [0, 1] and "every rank" in f["message"]
    assert {(l["rank"], l["line"], l["function"]) for l in f["locations"]} == {
        (0, line, "compute_loss"),
        (1, line, "compute_loss"),
    }
    assert "`self.recent_losses` (SmoothingTrainer.compute_loss" in f["message"]


@needs_transformers
def test_a_hugging_face_trainer_keeping_floats_is_clean(tmp_path):
    r = _memleak(tmp_path, "hf_trainer_recent_losses.py", "--healthy", timeout=240)
    assert r.code == 0 and _errors(r) == [], r.out
