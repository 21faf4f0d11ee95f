"""MIG geometry: table tests, an exhaustive check against an independent brute force, properties.

The brute force below shares nothing with nodes/mig.py: it has its own copy of the docs/design.md
section 4 table and decides validity of every subset of (profile, start) candidates with
bitmasks, so a wrong rule in mig.py (or in the catalog's profile table) shows up as a difference.
"""
from __future__ import annotations

import functools
import itertools
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodes.cluster.base import MIGDevice
from nodes.mig import (
    InvalidMIGLayout,
    MIGPlacement,
    candidate_placements,
    describe_counts,
    enumerate_maximal_layouts,
    free_placements,
    is_valid_layout,
    plan_layout,
    validate_placements,
)

# --- the independent brute force ----------------------------------------------------------------

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
ROWS = [  # docs/design.md section 4: compute slices, memory slices, max count, valid starts
    (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    (1, 2, 4, (0, 2, 4, 6)),
    (2, 2, 3, (0, 2, 4)),
    (3, 4, 2, (0, 4)),
    (4, 4, 1, (0,)),
    (7, 8, 1, (0,)),
]
NAMES = {  # profile name per row, per model
    "A100-SXM4-40GB": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "A100-SXM4-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-SXM5-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H200-SXM-141GB": ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
}
EXHAUSTIVE_MODELS = list(NAMES)
CANDIDATES = [(row, start) for row, (_, _, _, starts) in enumerate(ROWS) for start in starts]  # 18


@dataclass(frozen=True)
class BruteForce:
    valid: bytearray  # valid[mask] == 1 when the candidates in mask form a valid layout
    counts: dict[int, tuple[int, ...]]  # instances per row, for each valid mask
    maximal: frozenset[int]  # valid masks to which no candidate can be added


@functools.cache
def brute_force() -> BruteForce:
    """Decide every subset of the 18 candidates (2**18 masks), building each from a smaller one."""
    size = 1 << len(CANDIDATES)
    valid = bytearray(size)
    occupied = [0] * size
    compute = [0] * size
    per_row = [0] * size  # 4 bits per row
    valid[0] = 1
    for mask in range(1, size):
        low = mask & -mask
        rest = mask ^ low
        if not valid[rest]:
            continue
        row, start = CANDIDATES[low.bit_length() - 1]
        row_compute, row_memory, row_max, _ = ROWS[row]
        assert start + row_memory <= MEMORY_SLICES
        slices = ((1 << row_memory) - 1) << start
        count = (per_row[rest] >> (4 * row)) & 0xF
        if occupied[rest] & slices or compute[rest] + row_compute > COMPUTE_SLICES or count + 1 > row_max:
            continue
        valid[mask] = 1
        occupied[mask] = occupied[rest] | slices
        compute[mask] = compute[rest] + row_compute
        per_row[mask] = per_row[rest] + (1 << (4 * row))
    masks = [mask for mask in range(size) if valid[mask]]
    counts = {mask: tuple((per_row[mask] >> (4 * row)) & 0xF for row in range(len(ROWS))) for mask in masks}
    maximal = frozenset(
        mask for mask in masks if not any(not mask >> b & 1 and valid[mask | 1 << b] for b in range(len(CANDIDATES)))
    )
    return BruteForce(valid=valid, counts=counts, maximal=maximal)


def as_pairs(key: str, mask: int) -> frozenset[tuple[str, int]]:
    return frozenset((NAMES[key][CANDIDATES[b][0]], CANDIDATES[b][1]) for b in range(len(CANDIDATES)) if mask >> b & 1)


def as_mask(key: str, placements) -> int | None:
    """The candidate mask of a placement list, or None if some entry is no candidate or repeats."""
    mask = 0
    for name, start in placements:
        if name not in NAMES[key] or (NAMES[key].index(name), start) not in CANDIDATES:
            return None
        bit = 1 << CANDIDATES.index((NAMES[key].index(name), start))
        if mask & bit:
            return None  # the same instance twice overlaps itself
        mask |= bit
    return mask


def brute_force_accepts(key: str, placements) -> bool:
    mask = as_mask(key, placements)
    return mask is not None and bool(brute_force().valid[mask])


def pairs(layout) -> frozenset[tuple[str, int]]:
    return frozenset((p.profile, p.start) for p in layout)


# --- plan_layout / is_valid_layout tables --------------------------------------------------------

VALID_COUNTS = [
    ("A100-SXM4-40GB", {"3g.20gb": 2}),
    ("A100-SXM4-40GB", {"4g.20gb": 1, "3g.20gb": 1}),
    ("A100-SXM4-40GB", {"1g.5gb": 7}),
    ("A100-SXM4-40GB", {"2g.10gb": 3, "1g.5gb": 1}),
    ("A100-SXM4-40GB", {"1g.10gb": 4}),
    ("A100-SXM4-40GB", {"7g.40gb": 1}),
    ("A100-SXM4-80GB", {"3g.40gb": 1, "2g.20gb": 2}),  # the design's valid example
    ("A100-SXM4-80GB", {"2g.20gb": 3, "1g.10gb": 1}),
    ("A100-SXM4-80GB", {"4g.40gb": 1, "2g.20gb": 1, "1g.20gb": 1}),
    ("A100-SXM4-80GB", {"3g.40gb": 1, "1g.10gb": 4}),  # only fits with the 3g at slice 4
    ("H100-SXM5-80GB", {"3g.40gb": 2}),
    ("H100-SXM5-80GB", {"1g.10gb": 7}),
    ("H100-SXM5-80GB", {"1g.20gb": 1, "1g.10gb": 6}),
    ("H200-SXM-141GB", {"3g.71gb": 1, "2g.35gb": 2}),
    ("H200-SXM-141GB", {"4g.71gb": 1, "3g.71gb": 1}),
    ("H200-SXM-141GB", {"1g.18gb": 7}),
    ("H200-SXM-141GB", {"1g.35gb": 4}),
]


@pytest.mark.parametrize("key, counts", VALID_COUNTS)
def test_it_plans_valid_counts_into_valid_placements(key, counts):
    layout = plan_layout(key, counts)
    assert Counter(p.profile for p in layout) == Counter(counts)
    assert brute_force_accepts(key, [(p.profile, p.start) for p in layout])
    assert [p.start for p in layout] == sorted(p.start for p in layout)
    assert is_valid_layout(key, counts)


def test_it_places_larger_profiles_first_at_the_lowest_start_that_works():
    # 3g@0 leaves 4-7, where the second 2g has no valid start (2g starts at 0, 2, 4), so the
    # search backtracks to 3g@4 and packs the 2g instances at 0 and 2.
    assert plan_layout("A100-SXM4-80GB", {"3g.40gb": 1, "2g.20gb": 2}) == (
        MIGPlacement("2g.20gb", 0, 2),
        MIGPlacement("2g.20gb", 2, 2),
        MIGPlacement("3g.40gb", 4, 4),
    )
    assert plan_layout("A100-SXM4-40GB", {"2g.10gb": 3, "1g.5gb": 1}) == (
        MIGPlacement("2g.10gb", 0, 2),
        MIGPlacement("2g.10gb", 2, 2),
        MIGPlacement("2g.10gb", 4, 2),
        MIGPlacement("1g.5gb", 6, 1),
    )


INVALID_COUNTS = [
    # (model, counts, substrings the message must contain)
    ("A100-SXM4-80GB", {"3g.40gb": 2, "1g.10gb": 1}, [
        "2x 3g.40gb + 1x 1g.10gb does not fit on A100-SXM4-80GB",
        "they need 9 memory slices and a GPU has 8",
        "after placing 3g.40gb on memory slices 0-3 and 3g.40gb on memory slices 4-7",
        "no valid start is left for 1g.10gb",
        "free memory slices: none",
        "compute slices left: 1",
    ]),
    ("A100-SXM4-80GB", {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}, ["exceeds 7 compute slices (needs 8)"]),
    ("A100-SXM4-80GB", {"2g.20gb": 4}, ["at most 3x 2g.20gb fit on A100-SXM4-80GB (asked for 4)"]),
    ("A100-SXM4-80GB", {"4g.40gb": 2}, ["at most 1x 4g.40gb"]),
    ("A100-SXM4-40GB", {"1g.5gb": 8}, ["at most 7x 1g.5gb"]),
    ("A100-SXM4-40GB", {"7g.40gb": 1, "1g.5gb": 1}, ["1x 7g.40gb + 1x 1g.5gb", "exceeds 7 compute slices (needs 8)"]),
    ("A100-SXM4-40GB", {"3g.20gb": 2, "1g.5gb": 1}, ["need 9 memory slices", "no valid start is left for 1g.5gb"]),
    ("A100-SXM4-40GB", {"1g.10gb": 4, "1g.5gb": 1}, [
        "after placing 1g.10gb on memory slices 0-1 and 1g.10gb on memory slices 2-3 and "
        "1g.10gb on memory slices 4-5 and 1g.10gb on memory slices 6-7",
        "no valid start is left for 1g.5gb (it needs 1 memory slice starting at 0-6",
        "compute slices left: 3",
    ]),
    ("A100-SXM4-40GB", {"3g.40gb": 1}, ["unknown profile 3g.40gb for A100-SXM4-40GB (valid: 1g.5gb, 1g.10gb"]),
    ("H100-SXM5-80GB", {"3g.20gb": 1}, [
        "unknown profile 3g.20gb for H100-SXM5-80GB (valid: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)",
    ]),
    ("H100-SXM5-80GB", {"1g.20gb": 5}, ["at most 4x 1g.20gb"]),
    ("H100-SXM5-80GB", {"3g.40gb": 1, "4g.40gb": 1, "1g.20gb": 1}, ["exceeds 7 compute slices (needs 8)"]),
    ("H200-SXM-141GB", {"1g.35gb": 4, "1g.18gb": 1}, ["they need 9 memory slices", "no valid start is left for 1g.18gb"]),
    ("H200-SXM-141GB", {"7g.141gb": 1, "1g.18gb": 1}, ["exceeds 7 compute slices (needs 8)"]),
    ("H200-SXM-141GB", {"3g.71gb": 3}, ["at most 2x 3g.71gb"]),
    ("H200-SXM-141GB", {"3g.71gb": -1}, ["the count of 3g.71gb must be a non-negative integer, not -1"]),
]


@pytest.mark.parametrize("key, counts, reasons", INVALID_COUNTS)
def test_it_refuses_invalid_counts_saying_why(key, counts, reasons):
    with pytest.raises(InvalidMIGLayout) as excinfo:
        plan_layout(key, counts)
    for reason in reasons:
        assert reason in str(excinfo.value)
    assert not is_valid_layout(key, counts)


def test_it_names_the_profile_that_could_not_be_placed():
    with pytest.raises(InvalidMIGLayout) as excinfo:
        plan_layout("A100-SXM4-80GB", {"3g.40gb": 2, "1g.10gb": 1})
    assert excinfo.value.profile == "1g.10gb"


def test_it_plans_nothing_for_zero_counts():
    assert plan_layout("A100-SXM4-80GB", {}) == ()
    assert plan_layout("A100-SXM4-80GB", {"3g.40gb": 0}) == ()
    assert is_valid_layout("A100-SXM4-80GB", {})


def test_it_describes_counts_larger_profiles_first():
    assert describe_counts("A100-SXM4-80GB", {"1g.10gb": 1, "3g.40gb": 2}) == "2x 3g.40gb + 1x 1g.10gb"
    assert describe_counts("A100-SXM4-80GB", {}) == "nothing"


# --- validate_placements ---------------------------------------------------------------------------


def test_it_accepts_explicit_placements_and_returns_them_sorted_by_start():
    layout = validate_placements("A100-SXM4-80GB", [("3g.40gb", 4), ("2g.20gb", 2), MIGPlacement("2g.20gb", 0, 2)])
    assert layout == (MIGPlacement("2g.20gb", 0, 2), MIGPlacement("2g.20gb", 2, 2), MIGPlacement("3g.40gb", 4, 4))


def test_it_accepts_the_cluster_backends_mig_devices():
    devices = [MIGDevice("4g.40gb", 0, 4, "MIG-a"), MIGDevice("3g.40gb", 4, 4, "MIG-b")]
    assert pairs(validate_placements("H100-SXM5-80GB", devices)) == {("4g.40gb", 0), ("3g.40gb", 4)}


INVALID_PLACEMENTS = [
    ("A100-SXM4-80GB", [("3g.40gb", 4), ("2g.20gb", 4)], [
        "on A100-SXM4-80GB, 2g.20gb on memory slices 4-5 overlaps 3g.40gb on memory slices 4-7",
        "the same instances fit as 3g.40gb on memory slices 0-3, 2g.20gb on memory slices 4-5",
    ]),
    ("A100-SXM4-80GB", [("3g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 6)], [
        "1g.10gb on memory slice 6 overlaps 3g.40gb on memory slices 4-7",
        "these instances cannot be arranged to fit",
    ]),
    ("A100-SXM4-80GB", [("2g.20gb", 6)], ["2g.20gb cannot start at memory slice 6 on A100-SXM4-80GB (valid starts: 0, 2, 4)"]),
    ("A100-SXM4-40GB", [("1g.5gb", 7)], ["1g.5gb cannot start at memory slice 7", "(valid starts: 0, 1, 2, 3, 4, 5, 6)"]),
    ("A100-SXM4-40GB", [("4g.20gb", 0), ("4g.20gb", 0)], ["at most 1x 4g.20gb fit on A100-SXM4-40GB (asked for 2)"]),
    ("H100-SXM5-80GB", [("4g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 0)], ["exceeds 7 compute slices (needs 8)"]),
    ("H100-SXM5-80GB", [("3g.20gb", 0)], ["unknown profile 3g.20gb for H100-SXM5-80GB (valid: 1g.10gb"]),
    ("H200-SXM-141GB", [MIGPlacement("3g.71gb", 0, 2)], ["3g.71gb occupies 4 memory slices, not 2"]),
    ("H200-SXM-141GB", [("7g.141gb", "0")], ["7g.141gb cannot start at memory slice '0'"]),
]


@pytest.mark.parametrize("key, placements, reasons", INVALID_PLACEMENTS)
def test_it_refuses_invalid_placements_saying_why(key, placements, reasons):
    with pytest.raises(InvalidMIGLayout) as excinfo:
        validate_placements(key, placements)
    for reason in reasons:
        assert reason in str(excinfo.value)


@pytest.mark.parametrize("key", ["T4", "L4", "L40S", "V100-SXM2-32GB"])
def test_it_refuses_mig_on_models_without_it(key):
    for call in (
        lambda: plan_layout(key, {"1g.10gb": 1}),
        lambda: validate_placements(key, []),
        lambda: enumerate_maximal_layouts(key),
        lambda: free_placements(key, []),
    ):
        with pytest.raises(InvalidMIGLayout, match=f"^{key} does not support MIG$"):
            call()
    assert not is_valid_layout(key, {})


def test_it_raises_key_error_for_an_unknown_model_key():
    with pytest.raises(KeyError, match="unknown GPU model 'B200'"):
        plan_layout("B200", {})


# --- free_placements ---------------------------------------------------------------------------


def test_it_lists_the_placements_still_free_next_to_an_instance():
    # 3g.40gb on 0-3 leaves slices 4-7 and 4 compute slices; 4g and 7g only start at 0.
    assert free_placements("A100-SXM4-80GB", [("3g.40gb", 0)]) == [
        MIGPlacement("3g.40gb", 4, 4),
        MIGPlacement("2g.20gb", 4, 2),
        MIGPlacement("1g.20gb", 4, 2),
        MIGPlacement("1g.10gb", 4, 1),
        MIGPlacement("1g.10gb", 5, 1),
        MIGPlacement("1g.20gb", 6, 2),
        MIGPlacement("1g.10gb", 6, 1),
    ]
    assert free_placements("A100-SXM4-80GB", []) == list(candidate_placements("A100-SXM4-80GB"))
    assert len(candidate_placements("A100-SXM4-80GB")) == 18


def test_it_refuses_to_list_free_placements_next_to_an_invalid_layout():
    with pytest.raises(InvalidMIGLayout, match="overlaps"):
        free_placements("A100-SXM4-80GB", [("3g.40gb", 0), ("4g.40gb", 0)])


# --- exhaustive comparison with the brute force --------------------------------------------------


@pytest.mark.parametrize("key", EXHAUSTIVE_MODELS)
def test_it_enumerates_exactly_the_maximal_layouts_the_brute_force_finds(key):
    oracle = brute_force()
    layouts = enumerate_maximal_layouts(key)
    assert layouts == enumerate_maximal_layouts(key)  # deterministic
    assert layouts[0] == (MIGPlacement(NAMES[key][5], 0, 8),)  # the whole-GPU instance first
    found = [pairs(layout) for layout in layouts]
    assert len(set(found)) == len(found)
    assert set(found) == {as_pairs(key, mask) for mask in oracle.maximal}
    for layout in layouts:
        placement_pairs = [(p.profile, p.start) for p in layout]
        mask = as_mask(key, placement_pairs)
        assert mask is not None and oracle.valid[mask], layout
        # Maximal: no candidate (profile, start) can be added.
        assert not any(
            not mask >> b & 1 and oracle.valid[mask | 1 << b] for b in range(len(CANDIDATES))
        ), layout
        assert [p.start for p in layout] == sorted(p.start for p in layout)
        for p in layout:
            assert p.size == ROWS[NAMES[key].index(p.profile)][1]
        assert validate_placements(key, placement_pairs) == layout
        assert free_placements(key, layout) == []


@pytest.mark.parametrize("key", EXHAUSTIVE_MODELS)
def test_it_lists_free_placements_of_every_valid_layout_like_the_brute_force(key):
    oracle = brute_force()
    for mask in oracle.counts:
        layout = sorted(as_pairs(key, mask), key=lambda pair: pair[1])
        expected = {
            (NAMES[key][CANDIDATES[b][0]], CANDIDATES[b][1])
            for b in range(len(CANDIDATES))
            if not mask >> b & 1 and oracle.valid[mask | 1 << b]
        }
        assert pairs(free_placements(key, layout)) == expected, layout


@pytest.mark.parametrize("key", EXHAUSTIVE_MODELS)
def test_it_plans_every_count_vector_the_brute_force_can_place_and_refuses_the_rest(key):
    oracle = brute_force()
    placeable = set(oracle.counts.values())
    maxima = [row_max for _, _, row_max, _ in ROWS]
    checked = 0
    for vector in itertools.product(*(range(row_max + 1) for row_max in maxima)):  # 8*5*4*3*2*2 = 1920
        counts = {NAMES[key][row]: n for row, n in enumerate(vector) if n}
        if vector in placeable:
            layout = plan_layout(key, counts)
            assert brute_force_accepts(key, [(p.profile, p.start) for p in layout]), counts
            assert Counter(p.profile for p in layout) == Counter(counts)
        else:
            with pytest.raises(InvalidMIGLayout):
                plan_layout(key, counts)
        assert is_valid_layout(key, counts) is (vector in placeable)
        checked += 1
    assert checked == 1920


def test_the_brute_force_agrees_with_the_design_examples():
    # Guards the oracle itself: "2x 3g + 1x 1g(1 slice)" is impossible, "1x 3g + 2x 2g" possible.
    placeable = set(brute_force().counts.values())
    assert (1, 0, 0, 2, 0, 0) not in placeable
    assert (0, 0, 2, 1, 0, 0) in placeable
    assert (7, 0, 0, 0, 0, 0) in placeable and (0, 0, 0, 0, 0, 1) in placeable


# --- property: validate_placements agrees with the brute force on arbitrary lists ---------------


@st.composite
def placement_lists(draw, key: str):
    names = NAMES[key]
    real = st.sampled_from([(names[row], start) for row, start in CANDIDATES])
    noise = st.tuples(st.sampled_from(names + ["9g.99gb", "3g.20gb", "1g.5gb"]), st.integers(-1, 8))
    return draw(st.lists(st.one_of(real, real, real, noise), max_size=8))


@pytest.mark.parametrize("key", EXHAUSTIVE_MODELS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_it_accepts_a_placement_list_iff_the_brute_force_does(key, data):
    placements = data.draw(placement_lists(key))
    expected = brute_force_accepts(key, placements)
    try:
        layout = validate_placements(key, placements)
    except InvalidMIGLayout:
        assert not expected, placements
    else:
        assert expected, placements
        assert sorted((p.profile, p.start) for p in layout) == sorted(placements)
