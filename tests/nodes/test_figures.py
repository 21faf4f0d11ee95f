"""Numbers for people (nodes.figures): rounding that adds up, GB, GPU-equivalents."""
from __future__ import annotations

from fractions import Fraction

import pytest

from nodes.figures import (
    format_gb,
    format_number,
    format_percent,
    gpu_equivalent,
    largest_remainder,
    listed_shares,
    mig_compute_slices,
)
from nodes.vocabulary import PartitionKind


def test_largest_remainder_parts_add_up_to_the_rounded_whole():
    # 100/3 each: floors 33.3 x 3 = 99.9; the missing 0.1 goes to the first (ties: earlier part).
    assert largest_remainder([Fraction(100, 3)] * 3, 1) == [Fraction("33.4"), Fraction("33.3"), Fraction("33.3")]
    # 7 x 100/7 = 14.2857...: six round up to 14.3, one stays 14.2, 100.0 in all.
    seven = largest_remainder([Fraction(100, 7)] * 7, 1)
    assert sorted(seven) == [Fraction("14.2")] + [Fraction("14.3")] * 6
    assert sum(seven) == 100


@pytest.mark.parametrize("parts, decimals", [
    ([Fraction(1, 3), Fraction(1, 3), Fraction(1, 3)], 0),
    ([0.125, 0.375, 0.5], 2),
    ([Fraction(250, 7), Fraction(500, 7), 10, Fraction(1, 9)], 1),
    ([12.3456, 7.891, 0.0001], 2),
])
def test_largest_remainder_moves_no_part_by_a_whole_unit(parts, decimals):
    rounded = largest_remainder(parts, decimals)
    unit = Fraction(1, 10**decimals)
    exact_total = sum(Fraction(p) for p in parts)
    assert sum(rounded) == round(exact_total / unit) * unit
    assert all(abs(r - Fraction(p)) < unit for r, p in zip(rounded, parts, strict=True))


def test_largest_remainder_can_take_a_given_whole():
    assert largest_remainder([Fraction(1, 3), Fraction(2, 3)], 0, whole=2) == [1, 1]
    assert sum(largest_remainder([Fraction(100, 6)] * 6, 0, whole=100)) == 100


def test_mig_shares_are_rounded_not_truncated_and_equal_profiles_read_equal():
    three_g = gpu_equivalent(PartitionKind.MIG, 428, "3g.40gb")  # 428 is the stored, floored milli
    assert three_g == Fraction(3, 7)
    parts, rest = listed_shares([three_g, three_g])
    assert [format_percent(p) for p in parts] == ["42.9 %", "42.9 %"]  # not 42.8 %
    assert format_percent(rest) == "14.2 %" and sum(parts) + rest == 100
    # Two 1g beside a 2g: 14.3 + 14.3 = 28.6, as the 2g (no more 28.4 beside 28.5).
    one_g, two_g = gpu_equivalent("mig", 142, "1g.10gb"), gpu_equivalent("mig", 285, "2g.20gb")
    parts, rest = listed_shares([one_g, one_g, two_g])
    assert [format_percent(p) for p in parts] == ["14.3 %", "14.3 %", "28.6 %"]
    assert sum(parts) + rest == 100


def test_a_gpu_covered_by_its_partitions_lists_exactly_100_percent():
    parts, rest = listed_shares([Fraction(1, 7)] * 7)
    assert rest is None and sum(parts) == 100
    parts, rest = listed_shares([Fraction(4, 7), Fraction(2, 7), Fraction(1, 7)])
    assert rest is None and [str(float(p)) for p in parts] == ["57.1", "28.6", "14.3"]


def test_gpu_equivalents_of_every_kind():
    assert gpu_equivalent(PartitionKind.EXCLUSIVE, 1000) == 1
    assert gpu_equivalent(PartitionKind.MPS, 500) == Fraction(1, 2)
    assert gpu_equivalent(PartitionKind.TIMESLICE, 250) == Fraction(1, 4)
    assert gpu_equivalent(PartitionKind.MPS_WEIGHTED, 330) == Fraction(33, 100)
    assert gpu_equivalent(PartitionKind.MIG, 998, "7g.80gb") == 1
    # A profile without a compute prefix falls back to the stored share.
    assert gpu_equivalent(PartitionKind.MIG, 142, "odd") == Fraction(142, 1000)
    assert mig_compute_slices("2g.10gb") == 2 and mig_compute_slices("x") is None


def test_memory_is_written_in_gb_of_1024_mib():
    assert format_gb(81920) == "80 GB"
    assert format_gb(81559) == "79.6 GB"  # an H100's 81559 MiB
    assert format_gb(512) == "0.5 GB"
    assert format_gb(0) == "0 GB"
    assert format_gb(None) == "—"
    assert format_number(Fraction(3, 7), 2) == "0.43" and format_number(3.0, 2) == "3"
