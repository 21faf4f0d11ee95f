"""What sharing saves against the stated baseline, "every GPU-requesting workload on whole GPUs".

Pure Python (no Django): the savings app feeds it the cluster's occupants, tests feed it seed
003's examples, and the same arithmetic answers the API, the pages and /metrics.

The baseline: each occupant (a replica of a gpuplane deployment, or a pod gpuplane found using a
GPU) is given whole GPUs instead of what it holds: on every GPU it occupies, its share rounded
up to the whole GPU. A 1/4-GPU MPS replica counts 1 GPU, a replica over 2 whole GPUs counts 2,
two MIG instances of one pod on one GPU count 1. The GPUs actually used are the GPUs holding
anything. Saved = baseline - used, per GPU model (a workload's whole GPU is the model it runs
on), priced per GPU-hour and powered at the model's board power.

Over time, savings are sampled (usd/h, kWh/h, GPUs saved) and integrated as a step function:
each sample holds until the next one, but never longer than `max_hold_s`, so that an outage of
the sampler claims nothing.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

BASELINE = (
    "every GPU-requesting workload on whole GPUs: each replica or pod is given, on every GPU it "
    "occupies, a whole GPU of that model (a 1/4-GPU MPS replica = 1 GPU, a 2-GPU replica = 2)"
)


@dataclass(frozen=True)
class Holding:
    """What one occupant holds on one GPU, in GPU-equivalents (nodes.figures: 1/R, 3/7, ...)."""

    gpu: str  # the GPU's identity (its UUID)
    gpu_model: str  # catalog key; "" when unknown
    gpu_equivalents: Fraction


@dataclass(frozen=True)
class Occupant:
    """One replica of a deployment or one foreign pod, with every partition it holds."""

    key: str
    holdings: tuple[Holding, ...]


@dataclass(frozen=True)
class GPUCost:
    """The price of one GPU-hour of a model and the power it draws (board power, W)."""

    usd_per_hour: float
    power_w: float


@dataclass(frozen=True)
class ModelSavings:
    """The savings on the GPUs of one model."""

    gpu_model: str
    baseline_gpus: int
    gpus_used: int
    usd_per_gpu_hour: float
    power_w: float

    @property
    def gpus_saved(self) -> int:
        return self.baseline_gpus - self.gpus_used

    @property
    def usd_per_hour(self) -> float:
        return self.gpus_saved * self.usd_per_gpu_hour

    @property
    def kwh_per_hour(self) -> float:
        # Energy per hour of the GPUs not needed: W * 1 h / 1000.
        return self.gpus_saved * self.power_w / 1000


@dataclass(frozen=True)
class Savings:
    """The cluster's savings now, in total and by GPU model (the totals are the models' sums)."""

    baseline_gpus: int
    allocated_gpu_equivalents: Fraction
    gpus_used: int
    by_model: tuple[ModelSavings, ...]

    @property
    def gpus_saved(self) -> int:
        return self.baseline_gpus - self.gpus_used

    @property
    def saved_percent(self) -> float:
        """GPUs saved as a percentage of the baseline; 0 when nothing requests a GPU."""
        return self.gpus_saved * 100 / self.baseline_gpus if self.baseline_gpus else 0.0

    @property
    def usd_per_hour(self) -> float:
        return sum(model.usd_per_hour for model in self.by_model)

    @property
    def kwh_per_hour(self) -> float:
        return sum(model.kwh_per_hour for model in self.by_model)


def compute_savings(occupants: Iterable[Occupant], costs: Mapping[str, GPUCost]) -> Savings:
    """Baseline, used and saved GPUs of `occupants`, priced with `costs` (by GPU model; a model
    missing from it is priced at 0 $ and 0 W, so its GPUs are counted but cost nothing).

    Each occupant counts one baseline GPU per distinct GPU on which it holds anything; a GPU is
    used when any occupant holds anything on it. So baseline >= used always, and saved >= 0.
    """
    baseline: dict[str, int] = defaultdict(int)
    used: dict[str, set[str]] = defaultdict(set)
    # Shares counted by value and summed once: a fleet has few distinct shares but tens of
    # thousands of holdings, and each Fraction addition costs a gcd.
    shares: Counter[Fraction] = Counter()
    for occupant in occupants:
        per_gpu: dict[str, Fraction] = {}
        model_of: dict[str, str] = {}
        for holding in occupant.holdings:
            share = holding.gpu_equivalents
            held = per_gpu.get(holding.gpu)
            per_gpu[holding.gpu] = share if held is None else held + share
            model_of[holding.gpu] = holding.gpu_model
            shares[share] += 1
        for gpu, share in per_gpu.items():
            # ceil(share) GPUs on whole GPUs, and at least 1: a share is at most one GPU, and an
            # occupant holding only memory (share 0) still needs the GPU.
            baseline[model_of[gpu]] += max(1, -(-share.numerator // share.denominator))
            used[model_of[gpu]].add(gpu)
    zero = GPUCost(0.0, 0.0)
    by_model = tuple(
        ModelSavings(model, baseline[model], len(used[model]), costs.get(model, zero).usd_per_hour, costs.get(model, zero).power_w)
        for model in sorted(baseline)
    )
    return Savings(
        baseline_gpus=sum(baseline.values()),
        allocated_gpu_equivalents=sum((share * n for share, n in shares.items()), Fraction(0)),
        gpus_used=sum(len(gpus) for gpus in used.values()),
        by_model=by_model,
    )


@dataclass(frozen=True)
class Sample:
    """One recorded savings sample: from `ts` on, this many GPUs, $ and kWh per hour were saved."""

    ts: datetime
    gpus_saved: float
    usd_per_hour: float
    kwh_per_hour: float


@dataclass(frozen=True)
class Integrated:
    """Savings summed over a window."""

    gpu_hours: float
    usd: float
    kwh: float


def integrate_samples(samples: Sequence[Sample], start: datetime, end: datetime, max_hold_s: float) -> Integrated:
    """GPU-hours, $ and kWh saved in [`start`, `end`] from `samples` (any order).

    A sample's rates hold from its `ts` until the next sample, or `end`, but at most `max_hold_s`
    seconds: a gap (the sampler was down) counts nothing. A sample before `start` counts for
    the part of its hold that reaches into the window.
    """
    ordered = sorted(samples, key=lambda sample: sample.ts)
    gpu_hours = usd = kwh = 0.0
    for i, sample in enumerate(ordered):
        hold_end = ordered[i + 1].ts if i + 1 < len(ordered) else end
        from_ts = max(sample.ts, start)
        to_ts = min(hold_end, end)
        seconds = min((to_ts - from_ts).total_seconds(), (sample.ts - from_ts).total_seconds() + max_hold_s)
        if seconds <= 0:
            continue
        hours = seconds / 3600
        gpu_hours += sample.gpus_saved * hours
        usd += sample.usd_per_hour * hours
        kwh += sample.kwh_per_hour * hours
    return Integrated(gpu_hours, usd, kwh)
