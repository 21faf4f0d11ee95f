"""gpuplane's sharing plan: how a pod list's sharing pods would share GPUs if packed offline.

The replay protocol (docs/design.md section 13) lets a policy know the pod list, not the order its
pods come in (FGD's typical pods come from the same list). ``SharingPlan.build`` packs the list's
sharing pods offline, largest first, each onto the GPU it fills tightest (best-fit decreasing),
and keeps the resulting GPU contents ("patterns": 470+470, 650+320, 590+370, 810 alone ...).
Online, a sharing pod of ``milli`` onto a GPU already holding ``used`` milli is *on plan* when
some pattern holds pods summing to ``used`` plus one of ``milli``: the GPU is on its way to a
planned content. gpuplane only considers on-plan GPUs when there are any, so a 320 goes beside a
650 (30 milli left) or opens a GPU rather than sitting beside a 470 (210 milli left that only the
list's rare tiny pods fill). Only used milli is known per GPU, not which pods make it up: the
test is on the sum, which is enough to tell the list's patterns apart.

Pure Python and numpy; building the plan is O(pods x log(GPU sizes)) once per list.
"""
from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product

import numpy as np

from scheduler.core.fragmentation import WHOLE_GPU_MILLI


def best_fit_decreasing(sizes: Iterable[int], capacity: int = WHOLE_GPU_MILLI) -> Counter[tuple[int, ...]]:
    """The GPU contents (milli, largest first) that best-fit decreasing packs ``sizes`` into,
    with how many GPUs hold each. Of GPUs with equal free room, the one that reached it first
    takes the pod."""
    free_sizes: list[int] = []  # sorted distinct free room of open GPUs
    open_gpus: dict[int, list[list[int]]] = {}  # free room -> contents of the GPUs with it
    for size in sorted((s for s in sizes if 0 < s <= capacity), reverse=True):
        at = bisect.bisect_left(free_sizes, size)
        if at < len(free_sizes):
            room = free_sizes[at]
            contents = open_gpus[room].pop(0)
            if not open_gpus[room]:
                del open_gpus[room]
                free_sizes.pop(at)
        else:
            room, contents = capacity, []
        contents.append(size)
        left = room - size
        if left not in open_gpus:
            open_gpus[left] = []
            bisect.insort(free_sizes, left)
        open_gpus[left].append(contents)
    return Counter(tuple(c) for gpus in open_gpus.values() for c in gpus)


def _steps(pattern: tuple[int, ...]) -> set[tuple[int, int]]:
    """(used, milli) pairs where a GPU holding a sub-multiset of ``pattern`` summing to ``used``
    can take one more ``milli`` of the pattern."""
    counts = Counter(pattern)
    sizes = list(counts)
    steps: set[tuple[int, int]] = set()
    for taken in product(*(range(counts[s] + 1) for s in sizes)):
        used = sum(n * s for n, s in zip(taken, sizes, strict=True))
        steps.update((used, s) for n, s in zip(taken, sizes, strict=True) if n < counts[s])
    return steps


@dataclass(frozen=True)
class SharingPlan:
    """Planned GPU contents of a list's sharing pods, and the on-plan steps that follow from them."""

    patterns: Mapping[tuple[int, ...], int]
    steps: Mapping[int, np.ndarray]  # pod milli -> bool (WHOLE_GPU_MILLI + 1,) over used milli

    @classmethod
    def build(cls, sizes: Iterable[int]) -> SharingPlan:
        """The plan for sharing pods of these per-GPU milli (one entry per pod of the list)."""
        return cls.from_patterns(best_fit_decreasing(sizes))

    @classmethod
    def from_patterns(cls, patterns: Iterable[Iterable[int]] | Mapping[tuple[int, ...], int]) -> SharingPlan:
        """The plan of these GPU contents (each a list of per-GPU milli; with how many GPUs hold
        each when given as a mapping, as ``best_fit_decreasing`` returns them)."""
        counts: Counter[tuple[int, ...]] = Counter()
        if isinstance(patterns, Mapping):
            counts.update({tuple(sorted(p, reverse=True)): int(n) for p, n in patterns.items()})
        else:
            counts.update(tuple(sorted(p, reverse=True)) for p in patterns)
        steps: dict[int, np.ndarray] = {}
        for pattern in counts:
            for used, milli in _steps(pattern):
                steps.setdefault(milli, np.zeros(WHOLE_GPU_MILLI + 1, dtype=np.bool_))[used] = True
        return cls(patterns=dict(counts), steps=steps)

    def on_plan(self, milli: int, used: np.ndarray) -> np.ndarray:
        """Whether ``milli`` onto GPUs holding ``used`` milli (any shape) is a planned step."""
        table = self.steps.get(milli)
        if table is None:
            return np.zeros(np.shape(used), dtype=np.bool_)
        return table[np.clip(used, 0, WHOLE_GPU_MILLI)]
