"""Numbers for people: memory in GB, shares in percent, allocation in GPU-equivalents.

Pure Python (no Django), so pages, /metrics and tests compute each figure the same way.

Conventions, said once (docs/concepts.md, "Units and figures"):

- **GB means GiB**: 1 GB = 1024 MiB (nodes.vocabulary.MIB_PER_GB), as in the API's `memory_gb`
  and NVIDIA's MIG profile names ("3g.40gb"). Pages write "GB" and never "GiB".
- **GPU-equivalent**: the part of one GPU's compute a partition stands for: a whole GPU is 1, a
  MIG instance is its compute slices out of 7 (3g.40gb = 3/7, exact, not the stored 428
  thousandths), an MPS slot or a time-slice replica 1/R, a weighted MPS share its percentage.
  Different partition kinds are only ever added up in this unit, never as counts.
- Percentages listed side by side are rounded with the largest-remainder method, so the parts
  shown add up to the whole shown (three 1/3 shares read 33.4 + 33.3 + 33.3 = 100 %).
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

from nodes.catalog import MIG_COMPUTE_SLICES
from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL, PartitionKind

_MIG_COMPUTE = re.compile(r"^(\d+)g\.")


def largest_remainder(parts: Sequence[Fraction | int | float], decimals: int = 0, whole: Fraction | int | None = None) -> list[Fraction]:
    """`parts` rounded to `decimals` places so that they add up to `whole` rounded the same way.

    `whole` defaults to the exact sum of the parts. Each part is first rounded down; the units
    still missing go, one each, to the parts with the largest remainders (ties: the earlier
    part), so no part moves by a unit or more and identical parts differ by at most one unit.
    `largest_remainder([1/3] * 3 scaled to 100, 1)` -> 33.4, 33.3, 33.3.
    """
    unit = Fraction(1, 10**decimals)
    exact = [Fraction(part) for part in parts]
    target_whole = sum(exact, Fraction(0)) if whole is None else Fraction(whole)
    target_units = math.floor(target_whole / unit + Fraction(1, 2))  # half up
    floors = [math.floor(part / unit) for part in exact]
    missing = target_units - sum(floors)
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] / unit - floors[i]), i))
    units = list(floors)
    if missing > 0:
        for i in by_remainder[:missing]:
            units[i] += 1
    elif missing < 0:  # a whole smaller than the parts: take from the smallest remainders
        for i in reversed(by_remainder[missing:]):
            units[i] -= 1
    return [u * unit for u in units]


def format_number(value: Fraction | float, decimals: int) -> str:
    """`value` with at most `decimals` places, trailing zeros dropped: 42.90 -> "42.9", 3.0 -> "3"."""
    text = f"{float(value):.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_gb(memory_mib: int | float | None, decimals: int = 1) -> str:
    """Memory for people in GB (1 GB = 1024 MiB): 81920 -> "80 GB", 40448 -> "39.5 GB"; "—" when unknown."""
    if memory_mib is None:
        return "—"
    return f"{format_number(Fraction(memory_mib) / MIB_PER_GB, decimals)} GB"


def format_percent(value: Fraction | float, decimals: int = 1) -> str:
    """A percentage rounded (not truncated) to `decimals` places: 3/7 of 100 -> "42.9 %"."""
    return f"{format_number(value, decimals)} %"


def mig_compute_slices(profile: str) -> int | None:
    """The compute slices a MIG profile names ("3g.40gb" -> 3), or None for a name without them."""
    match = _MIG_COMPUTE.match(profile)
    return int(match.group(1)) if match else None


# Memoized: a fleet has a handful of distinct partition shapes but tens of thousands of partitions,
# and the savings and overview read one per occupied partition (Fractions are immutable).
@lru_cache(maxsize=4096)
def gpu_equivalent(kind: str, share_milli: int, mig_profile: str = "") -> Fraction:
    """How much of one GPU a partition stands for (see the module docstring), exactly.

    MIG instances count by their profile's compute slices out of 7; the stored `share_milli` is
    rounded down (3g = 428) so that a full GPU never adds up past 1000, which would misstate a
    layout's total (7 x 1g = 0.994). Every other kind counts as its `share_milli`.
    """
    if kind == PartitionKind.MIG:
        slices = mig_compute_slices(mig_profile)
        if slices is not None:
            return Fraction(min(slices, MIG_COMPUTE_SLICES), MIG_COMPUTE_SLICES)
    return Fraction(share_milli, SHARE_MILLI_FULL)


def listed_shares(shares: Sequence[Fraction], decimals: int = 1) -> tuple[list[Fraction], Fraction | None]:
    """Percentages for shares of one GPU listed together, and the percentage of the GPU left over.

    The parts and the remainder (None when the shares cover the GPU, or overflow it) add up to
    100 % as shown. With a remainder each part is simply rounded, so equal partitions read
    equal, and the remainder takes the difference: 3g.40gb + 3g.40gb -> 42.9 %, 42.9 % and 14.2 %
    not in any instance. Without one the parts are rounded by largest remainder to add up to
    their exact total: 7 x 1g -> six 14.3 % and one 14.2 %, 100 % in all.
    """
    total = sum(shares, Fraction(0))
    parts = [share * 100 for share in shares]
    unit = Fraction(1, 10**decimals)
    if total < 1:
        rounded = [math.floor(part / unit + Fraction(1, 2)) * unit for part in parts]
        rest = 100 - sum(rounded, Fraction(0))
        if rest >= 0:
            return rounded, rest
        rounded_all = largest_remainder([*parts, (1 - total) * 100], decimals, whole=100)  # many tiny parts
        return rounded_all[:-1], rounded_all[-1]
    return largest_remainder(parts, decimals), None
