"""MIG geometry: which sets of MIG instances fit on one GPU, and where they go.

Pure Python; imports only ``nodes.catalog``. The rules (docs/design.md section 4): a GPU has 8 memory
slices and 7 compute slices; an instance of a profile occupies memory slices
``[start, start + memory_slices)`` and must start at one of the profile's valid starts; no two
instances overlap; a profile has at most ``max_count`` instances; the instances' compute slices
add up to at most 7.

Every function taking ``model`` accepts a ``GPUModel`` or a catalog key (an unknown key raises the
catalog's ``UnknownGPUModel``, a ``KeyError``); a model without MIG raises ``InvalidMIGLayout``.
Errors say why a layout is invalid in words an operator can act on.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from nodes.catalog import MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, GPUModel, MIGProfile, find_model

_ALL_MEMORY_SLICES_MASK = (1 << MIG_MEMORY_SLICES) - 1


@dataclass(frozen=True)
class MIGPlacement:
    """One MIG instance on a GPU: its profile, first memory slice and size in memory slices."""

    profile: str
    start: int
    size: int

    @property
    def end(self) -> int:
        """One past the last memory slice the instance occupies."""
        return self.start + self.size

    def __str__(self) -> str:
        return f"{self.profile} on {_slice_span(self.start, self.end)}"


class InvalidMIGLayout(ValueError):
    """A set of MIG instances that cannot exist on the GPU; the message says why.

    ``profile`` names the profile that is unknown, misplaced or could not be placed, when one
    profile is to blame.
    """

    def __init__(self, message: str, *, profile: str | None = None) -> None:
        super().__init__(message)
        self.profile = profile


ModelRef = GPUModel | str
# A placement may be given as a MIGPlacement, as (profile, start) or (profile, start, size), or
# as any object with ``profile`` and ``start`` (and optionally ``size``) attributes, such as the
# cluster backend's MIGDevice.
PlacementLike = Any


def validate_placements(model: ModelRef, placements: Iterable[PlacementLike]) -> tuple[MIGPlacement, ...]:
    """Check explicit placements against the MIG rules and return them sorted by start.

    Raises ``InvalidMIGLayout`` naming the first broken rule, checked in this order: every
    profile exists on the model; every start is a valid start of its profile (and a given size
    matches the profile's memory slices); no profile exceeds its ``max_count``; the compute slices
    add up to at most 7; no two instances overlap. The count-level rules come before overlap
    because no rearrangement can repair them; an overlap message says where the same instances
    would fit when they can.
    """
    gpu = _resolve_model(model)
    normalized = [_normalize(gpu, placement) for placement in placements]
    counts = layout_counts(normalized)
    _check_counts(gpu, counts)

    occupied = 0
    by_start = sorted(normalized, key=lambda p: _placement_sort_key(gpu, p))
    for index, placement in enumerate(by_start):
        mask = _slice_mask(placement.start, placement.size)
        if occupied & mask:
            other = next(p for p in by_start[:index] if _slice_mask(p.start, p.size) & mask)
            message = f"on {gpu.key}, {placement} overlaps {other}"
            try:
                fitting = plan_layout(gpu, counts)
            except InvalidMIGLayout:
                message += "; these instances cannot be arranged to fit"
            else:
                message += "; the same instances fit as " + ", ".join(str(p) for p in fitting)
            raise InvalidMIGLayout(message, profile=placement.profile)
        occupied |= mask
    return tuple(by_start)


def plan_layout(model: ModelRef, counts: Mapping[str, int]) -> tuple[MIGPlacement, ...]:
    """Place ``counts`` instances per profile (e.g. ``{"3g.40gb": 1, "2g.20gb": 2}``) on one GPU.

    Returns the placements sorted by start. The search is a deterministic backtracking search:
    larger profiles are placed first, each at its lowest free valid start, so equal counts always
    give equal layouts. Raises ``InvalidMIGLayout`` when no placement exists, saying why: an
    unknown profile or bad count, a ``max_count`` exceeded, more than 7 compute slices needed, or
    which profile could not be placed after which others and what was left free.
    """
    gpu = _resolve_model(model)
    wanted: dict[str, int] = {}
    for name, count in counts.items():
        profile = _profile(gpu, name)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidMIGLayout(
                f"the count of {name} must be a non-negative integer, not {count!r}", profile=name
            )
        if count:
            wanted[profile.name] = count
    _check_counts(gpu, wanted)

    # Larger instances first: they have the fewest valid starts, so placing them early prunes
    # the search and leaves the flexible 1-slice instances to fill the gaps.
    instances = sorted(
        (gpu.mig_profile(name) for name, count in wanted.items() for _ in range(count)),
        key=lambda p: (-p.memory_slices, -p.compute_slices, p.name),
    )
    deepest: list[tuple[int, tuple[MIGPlacement, ...], int]] = []  # (depth, placed, occupied)

    def search(index: int, occupied: int, placed: tuple[MIGPlacement, ...]) -> tuple[MIGPlacement, ...] | None:
        if index == len(instances):
            return placed
        profile = instances[index]
        # Instances of one profile are interchangeable: keep their starts increasing so the
        # search never tries the same layout in another order.
        lowest = placed[-1].start + 1 if placed and placed[-1].profile == profile.name else 0
        for start in profile.valid_starts:
            mask = _slice_mask(start, profile.memory_slices)
            if start < lowest or occupied & mask:
                continue
            found = search(index + 1, occupied | mask, placed + (MIGPlacement(profile.name, start, profile.memory_slices),))
            if found is not None:
                return found
        if not deepest or index > deepest[0][0]:
            deepest[:] = [(index, placed, occupied)]
        return None

    layout = search(0, 0, ())
    if layout is not None:
        return tuple(sorted(layout, key=lambda p: _placement_sort_key(gpu, p)))

    depth, placed, occupied = deepest[0]
    blocked = instances[depth]
    needed_memory_slices = sum(p.memory_slices for p in instances)
    reasons = []
    if needed_memory_slices > MIG_MEMORY_SLICES:
        reasons.append(f"they need {needed_memory_slices} memory slices and a GPU has {MIG_MEMORY_SLICES}")
    compute_left = MIG_COMPUTE_SLICES - sum(gpu.mig_profile(p.profile).compute_slices for p in placed)
    reasons.append(
        f"{_describe_placed(placed)} no valid start is left for {blocked.name} "
        f"(it needs {_plural(blocked.memory_slices, 'memory slice')} starting at "
        f"{_format_starts(blocked.valid_starts)}; free memory slices: "
        f"{_format_slices(_ALL_MEMORY_SLICES_MASK & ~occupied)}; compute slices left: {compute_left})"
    )
    raise InvalidMIGLayout(
        f"{describe_counts(gpu, wanted)} does not fit on {gpu.key}: " + "; ".join(reasons), profile=blocked.name
    )


def is_valid_layout(model: ModelRef, counts: Mapping[str, int]) -> bool:
    """True when ``plan_layout`` can place ``counts``; False for any ``InvalidMIGLayout``.

    A model without MIG gives False; an unknown catalog key still raises ``KeyError``.
    """
    try:
        plan_layout(model, counts)
    except InvalidMIGLayout:
        return False
    return True


def candidate_placements(model: ModelRef) -> tuple[MIGPlacement, ...]:
    """Every (profile, valid start) placement of the model, in canonical order.

    Canonical order: by start, then larger instances first (memory, then compute slices).
    """
    gpu = _resolve_model(model)
    return _candidates(gpu)


def free_placements(model: ModelRef, existing: Iterable[PlacementLike]) -> list[MIGPlacement]:
    """Placements that could be added to the valid layout ``existing``, in canonical order.

    Each returned placement alone can be added while respecting every rule (overlap, compute
    slices, max counts); two returned placements may exclude each other. Raises
    ``InvalidMIGLayout`` if ``existing`` itself is invalid.
    """
    gpu = _resolve_model(model)
    layout = validate_placements(gpu, existing)
    occupied = 0
    for placement in layout:
        occupied |= _slice_mask(placement.start, placement.size)
    counts = layout_counts(layout)
    compute_used = sum(gpu.mig_profile(p.profile).compute_slices for p in layout)
    free = []
    for candidate in _candidates(gpu):
        profile = gpu.mig_profile(candidate.profile)
        if (
            not occupied & _slice_mask(candidate.start, candidate.size)
            and counts[candidate.profile] < profile.max_count
            and compute_used + profile.compute_slices <= MIG_COMPUTE_SLICES
        ):
            free.append(candidate)
    return free


def enumerate_maximal_layouts(model: ModelRef) -> list[tuple[MIGPlacement, ...]]:
    """Every valid layout to which no further instance can be added.

    Each layout is sorted by start (canonical order), and the list is sorted by the layouts'
    canonical placement order, so the whole-GPU instance comes first. The result is computed once
    per model and copied on return.
    """
    gpu = _resolve_model(model)
    return list(_maximal_layouts(gpu))


def layout_counts(placements: Iterable[MIGPlacement]) -> Counter[str]:
    """Instances per profile name, the ``mig-devices`` shape of a mig-parted config."""
    return Counter(p.profile for p in placements)


def describe_counts(model: ModelRef, counts: Mapping[str, int]) -> str:
    """Render counts as ``"2x 3g.40gb + 1x 1g.10gb"``, larger profiles first; ``"nothing"`` if empty."""
    gpu = model if isinstance(model, GPUModel) else find_model(model)
    rank = {p.name: index for index, p in enumerate(gpu.mig_profiles)}
    names = sorted((name for name, count in counts.items() if count), key=lambda n: (-rank.get(n, -1), n))
    return " + ".join(f"{counts[name]}x {name}" for name in names) or "nothing"


# --- internals -------------------------------------------------------------------------------


def _resolve_model(model: ModelRef) -> GPUModel:
    gpu = find_model(model) if isinstance(model, str) else model
    if not gpu.mig_capable:
        raise InvalidMIGLayout(f"{gpu.key} does not support MIG")
    return gpu


def _profile(gpu: GPUModel, name: str) -> MIGProfile:
    for profile in gpu.mig_profiles:
        if profile.name == name:
            return profile
    valid = ", ".join(p.name for p in gpu.mig_profiles)
    raise InvalidMIGLayout(f"unknown profile {name} for {gpu.key} (valid: {valid})", profile=str(name))


def _normalize(gpu: GPUModel, placement: PlacementLike) -> MIGPlacement:
    size: object = None
    if isinstance(placement, tuple):
        if len(placement) not in (2, 3):
            raise InvalidMIGLayout(f"a placement is (profile, start) or (profile, start, size), not {placement!r}")
        name, start, *rest = placement
        size = rest[0] if rest else None
    else:
        name, start, size = placement.profile, placement.start, getattr(placement, "size", None)
    profile = _profile(gpu, name)
    if not isinstance(start, int) or isinstance(start, bool) or start not in profile.valid_starts:
        raise InvalidMIGLayout(
            f"{profile.name} cannot start at memory slice {start!r} on {gpu.key} "
            f"(valid starts: {', '.join(map(str, profile.valid_starts))})",
            profile=profile.name,
        )
    if size is not None and size != profile.memory_slices:
        raise InvalidMIGLayout(
            f"{profile.name} occupies {_plural(profile.memory_slices, 'memory slice')}, "
            f"not {size!r} as given at start {start}",
            profile=profile.name,
        )
    return MIGPlacement(profile.name, start, profile.memory_slices)


def _check_counts(gpu: GPUModel, counts: Mapping[str, int]) -> None:
    """The rules that depend only on how many instances of each profile are asked for."""
    for profile in gpu.mig_profiles:
        count = counts.get(profile.name, 0)
        if count > profile.max_count:
            raise InvalidMIGLayout(
                f"at most {profile.max_count}x {profile.name} fit on {gpu.key} (asked for {count})",
                profile=profile.name,
            )
    compute = sum(gpu.mig_profile(name).compute_slices * count for name, count in counts.items())
    if compute > MIG_COMPUTE_SLICES:
        raise InvalidMIGLayout(
            f"{describe_counts(gpu, counts)} does not fit on {gpu.key}: "
            f"exceeds {MIG_COMPUTE_SLICES} compute slices (needs {compute})"
        )


def _slice_mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _placement_sort_key(gpu: GPUModel, placement: MIGPlacement) -> tuple[int, int, int, str]:
    compute = gpu.mig_profile(placement.profile).compute_slices
    return (placement.start, -placement.size, -compute, placement.profile)


@cache
def _candidates(gpu: GPUModel) -> tuple[MIGPlacement, ...]:
    candidates = [
        MIGPlacement(profile.name, start, profile.memory_slices)
        for profile in gpu.mig_profiles
        for start in profile.valid_starts
    ]
    return tuple(sorted(candidates, key=lambda p: _placement_sort_key(gpu, p)))


@cache
def _maximal_layouts(gpu: GPUModel) -> tuple[tuple[MIGPlacement, ...], ...]:
    candidates = _candidates(gpu)
    masks = [_slice_mask(c.start, c.size) for c in candidates]
    profiles = [gpu.mig_profile(c.profile) for c in candidates]

    def can_add(index: int, occupied: int, compute: int, counts: Counter[str]) -> bool:
        profile = profiles[index]
        return (
            not occupied & masks[index]
            and compute + profile.compute_slices <= MIG_COMPUTE_SLICES
            and counts[profile.name] < profile.max_count
        )

    maximal: list[tuple[MIGPlacement, ...]] = []

    # Each valid layout is built once, by adding candidates in increasing index order.
    def extend(first: int, chosen: list[int], occupied: int, compute: int, counts: Counter[str]) -> None:
        if not any(can_add(i, occupied, compute, counts) for i in range(len(candidates))):
            maximal.append(tuple(candidates[i] for i in chosen))
            return
        for index in range(first, len(candidates)):
            if can_add(index, occupied, compute, counts):
                counts[profiles[index].name] += 1
                chosen.append(index)
                extend(index + 1, chosen, occupied | masks[index], compute + profiles[index].compute_slices, counts)
                chosen.pop()
                counts[profiles[index].name] -= 1

    extend(0, [], 0, 0, Counter())
    # Candidates are in canonical order and chosen in increasing index order, so each layout is
    # already sorted; sorting the list by the candidate indexes gives a stable, readable order.
    index_of = {c: i for i, c in enumerate(candidates)}
    return tuple(sorted(maximal, key=lambda layout: [index_of[p] for p in layout]))


def _slice_span(start: int, end: int) -> str:
    return f"memory slice {start}" if end - start == 1 else f"memory slices {start}-{end - 1}"


def _format_slices(mask: int) -> str:
    """Render a slice bitmask as ``"0-3, 6"``; ``"none"`` when empty."""
    spans = []
    slice_index = 0
    while slice_index < MIG_MEMORY_SLICES:
        if mask >> slice_index & 1:
            end = slice_index
            while end + 1 < MIG_MEMORY_SLICES and mask >> (end + 1) & 1:
                end += 1
            spans.append(str(slice_index) if end == slice_index else f"{slice_index}-{end}")
            slice_index = end + 1
        else:
            slice_index += 1
    return ", ".join(spans) or "none"


def _format_starts(starts: Sequence[int]) -> str:
    if len(starts) > 2 and list(starts) == list(range(starts[0], starts[-1] + 1)):
        return f"{starts[0]}-{starts[-1]}"
    return ", ".join(map(str, starts))


def _describe_placed(placed: Sequence[MIGPlacement]) -> str:
    if not placed:
        return "on an empty GPU"
    return "after placing " + " and ".join(str(p) for p in placed) + ","


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
