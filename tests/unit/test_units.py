"""units.size: the one way a report, a picture or ``compare`` writes a number of bytes."""

from __future__ import annotations

import pytest

from ddpdoctor.units import size


@pytest.mark.parametrize(
    "n, text",
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1365, "1.33 KiB"),
        (2**20, "1.00 MiB"),
        (3 * 2**30 + 2**29, "3.50 GiB"),
        (5 * 2**40, "5120.00 GiB"),  # GiB is the largest unit
        (0.4, "0 B"),
    ],
)
def test_binary_units_with_two_decimals(n, text):
    assert size(n) == text


def test_a_negative_size_keeps_its_sign_in_the_same_unit():
    assert size(-2 * 2**20) == "-2.00 MiB"
    assert size(-100) == "-100 B"
    assert size(-(2**10)) == "-1.00 KiB"
