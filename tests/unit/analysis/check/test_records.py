"""A rank's check records read as sampler passes and loaders (analysis/check/records.py), and the small
helpers the data findings share: the minority ranks, grouped values, peeks and training epochs."""

from __future__ import annotations

from ddpdoctor.analysis.check.records import _epochs, _grouped, _minority, _rank_data, _trained_loaders


def _sampler(k: int, epoch: int, ordinal: int = 0, n: int = 100) -> dict:
    return {"kind": "sampler", "ordinal": ordinal, "k": k, "sid": 1, "epoch": epoch, "n": n}


def test_passes_are_grouped_by_sampler_and_marked_by_what_trained_in_them() -> None:
    d = _rank_data(
        [
            {"kind": "sampler_init", "ordinal": 0, "sid": 1},
            _sampler(0, 0),
            {"kind": "sampler_train", "ordinal": 0, "k": 0, "by": "step"},
            _sampler(1, 1),
            {"kind": "sampler_end", "ordinal": 0, "k": 1, "consumed": 100, "exhausted": True, "steps": 0, "fwds": 3},
            _sampler(0, 0, ordinal=1),
            {"kind": "set_epoch", "ordinal": 0, "epoch": 1},
            {"kind": "optstep", "micro": 1},
        ]
    )
    assert sorted(d.passes) == [0, 1] and [p.k for p in d.passes[0]] == [0, 1]
    assert d.passes[0][0].by == {"step"} and d.passes[0][1].by == {"fwd"}
    assert d.passes[0][1].end["consumed"] == 100
    assert d.inits[0]["sid"] == 1 and len(d.set_epochs[0]) == 1
    assert d.has_optimizer and d.has_marks


def test_older_records_without_ordinals_count_one_sampler_per_id() -> None:
    d = _rank_data([{"kind": "sampler", "sid": 7, "epoch": 0}, {"kind": "sampler", "sid": 9, "epoch": 0}])
    assert sorted(d.passes) == [0, 1] and not d.has_marks


def test_a_peek_of_a_few_batches_is_not_a_training_epoch() -> None:
    checks = [
        {"kind": "loader", "ordinal": 0, "sampler_sid": 1, "batch_size": 4, "prefetch": 1},
        _sampler(0, 0),
        {"kind": "sampler_end", "ordinal": 0, "k": 0, "consumed": 8, "exhausted": False, "steps": 1},
        _sampler(1, 0),
        {"kind": "sampler_end", "ordinal": 0, "k": 1, "consumed": 100, "exhausted": True, "steps": 25},
    ]
    d = _rank_data(checks)
    assert [p.k for p in _epochs(d, d.passes[0])] == [1]


def test_loaders_count_as_trained_only_when_a_step_ran_with_an_optimizer() -> None:
    d = _rank_data(
        [
            {"kind": "loader", "ordinal": 0},
            {"kind": "loader", "ordinal": 1},
            {"kind": "loader_train", "ordinal": 0, "by": "fwd"},
            {"kind": "loader_train", "ordinal": 1, "by": "step"},
            {"kind": "optstep"},
        ]
    )
    assert [l["ordinal"] for l in _trained_loaders(d)] == [1]


def test_the_minority_is_the_ranks_apart_from_the_most_common_value() -> None:
    assert _minority({0: 5, 1: 5, 2: 7}) == (2,)
    assert _minority({0: 5, 1: 7}) == (1,)  # a tie: rank 0's value is the common one
    assert _minority({0: 1, 1: 2, 2: 2}) == (0,)


def test_grouped_values_read_as_value_on_ranks() -> None:
    assert _grouped({0: 0, 1: 0, 2: 7}) == "0 on 2 ranks [0,1], 7 on rank 2"
