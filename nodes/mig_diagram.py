"""The MIG slot diagram of a GPU: its instances laid out on the 8 memory slices, for the node and
GPU pages (templates/nodes/_gpu_partitions.html)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nodes.catalog import MIG_MEMORY_SLICES
from nodes.holds import HolderInfo
from nodes.models import Partition


def occupant_of(partition: Partition, holders: Mapping[int, HolderInfo]) -> str | None:
    """Who holds a partition: its holder's label ("namespace/deployment #replica" for a placement),
    the pod, or None if free. `holders` is what `partition_holder().describe()` said of the page's
    partitions."""
    holder = holders.get(partition.pk) if partition.pk is not None else None
    if holder is not None:
        return holder.label
    return partition.pod or None


@dataclass(frozen=True)
class MIGCell:
    """One box of the MIG slot diagram: a MIG instance spanning [start, start+size), or an unused slice.

    `column` and `span` are CSS grid coordinates (1-based column line); `lane` is the grid row,
    greater than 1 only when stored instances overlap, which a valid layout never does.
    """

    start: int
    size: int
    lane: int
    profile: str = ""
    occupant: str | None = None

    @property
    def is_instance(self) -> bool:
        return bool(self.profile)

    @property
    def profile_compute(self) -> str:
        """The part of the profile before its first dot ("3g" of "3g.40gb"), so pages can wrap there."""
        return self.profile.partition(".")[0]

    @property
    def profile_memory(self) -> str:
        return self.profile.partition(".")[2]

    @property
    def is_used(self) -> bool:
        return self.occupant is not None

    @property
    def column(self) -> int:
        return self.start + 1

    @property
    def end(self) -> int:
        """Last memory slice covered (inclusive), for people: a 3g at start 0 covers slices 0–3."""
        return self.start + self.size - 1

    @property
    def slices_text(self) -> str:
        return f"slice {self.start}" if self.size == 1 else f"slices {self.start}–{self.end}"

    @property
    def aria_label(self) -> str:
        if not self.is_instance:
            return f"{self.slices_text} unused"
        state = f"in use by {self.occupant}" if self.is_used else "free"
        return f"{self.profile} at {self.slices_text}, {state}"


def mig_diagram(partitions: list[Partition], holders: Mapping[int, HolderInfo] | None = None) -> list[MIGCell]:
    """Lay a GPU's MIG partitions out on the 8 memory slices, sorted by lane, then start.

    Every MIG instance becomes a cell spanning its [start, start+size), clipped to the 8 slices;
    each slice that no instance covers becomes an empty one-slice cell in lane 1. An instance
    overlapping an earlier one goes to the next free lane, so that broken data shows up instead of
    hiding under another block (a valid layout always fits in lane 1). `holders` names the held
    instances' occupants (see `occupant_of`).
    """
    holders = holders or {}
    placed = sorted(
        ((p.mig_start, p.mig_size, p) for p in partitions if p.mig_start is not None and p.mig_size),
        key=lambda item: (item[0], item[2].slot),
    )
    cells: list[MIGCell] = []
    lanes: list[set[int]] = []
    for raw_start, raw_size, partition in placed:
        start = min(raw_start, MIG_MEMORY_SLICES - 1)
        size = max(1, min(raw_size, MIG_MEMORY_SLICES - start))
        covered = set(range(start, start + size))
        lane = next((i for i, used in enumerate(lanes) if not used & covered), len(lanes))
        if lane == len(lanes):
            lanes.append(set())
        lanes[lane] |= covered
        cells.append(MIGCell(start, size, lane + 1, partition.mig_profile, occupant_of(partition, holders)))
    taken: set[int] = set().union(*lanes)
    cells.extend(MIGCell(s, 1, 1) for s in range(MIG_MEMORY_SLICES) if s not in taken)
    return sorted(cells, key=lambda c: (c.lane, c.start))
