"""exits.rank_exits on a real script: a loop's exits narrowed to those under a rank test, when it has any."""

from __future__ import annotations

from ddpdoctor.analysis.hang.exits import rank_exits

SCRIPT = """\
def train(ddp_rank, it, max_iters):
    while True:
        it += 1
        if it > max_iters:
            break
        if ddp_rank == 1 and it == 3:
            break
        if it < 0:
            return
"""
COMMON_BREAK, RANK_BREAK, RETURN = 5, 7, 9


def test_a_rank_tested_exit_is_the_one_only_some_ranks_take(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    assert rank_exits(str(path), (COMMON_BREAK, RANK_BREAK, RETURN)) == (RANK_BREAK,)


def test_without_a_rank_tested_exit_every_exit_is_kept(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    assert rank_exits(str(path), (COMMON_BREAK, RETURN)) == (COMMON_BREAK, RETURN)
    assert rank_exits(str(tmp_path / "gone.py"), (4, 5)) == (4, 5)
