"""SimulatedCollector: plausible GPU metrics driven by what runs on each GPU of the inventory.

The demo and the tests have no GPUs, yet the charts, idle detection and the scheduler's
utilization thresholds need numbers that behave like real ones. This collector derives them from
the inventory (GPU rows and their occupied partitions: pods that inventory sync found on the
simulated cluster, and partitions held by the placement engine, asked through nodes.holds):

- utilization_pct = sum over occupants of (share of the GPU x load factor) x 100, plus a little
  noise; the load factor depends on the kind of workload (training ~0.9, serving ~0.55,
  notebooks ~0.15, see `_WORKLOAD_LOAD`), the holder's workload type or else guessed from the
  pod's namespace and name, and drifts slowly. A GPU with nothing on it idles at 0-3 %.
- memory_used_mib = memory handed out on the GPU (GPU.allocated_memory_mib) x how full the
  occupants keep it, plus ~300 MiB CUDA context per occupant, capped at the GPU's memory.
- power_w between the board's idle draw (15-20 % of its catalog TDP) and its TDP, by utilization;
  power_limit_w is the TDP (300 W for a model missing from the catalog).
- temperature_c follows power: 28 C ambient + up to ~50 C at TDP.
- sm_clock_mhz is not simulated (missing), nor are processes. MIG-enabled GPUs report
  utilization too (NVML would not; DCGM's per-instance profiling metrics would), so that idle
  detection has something to work with on the demo's MIG nodes.

Deterministic: every random-looking number is a hash of (seed, GPU or occupant, time bucket),
never `random`, so the same seed and the same time give the same readings in every process, and
consecutive times give a smooth walk (values are interpolated between buckets).
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from django.db.models import Q

from nodes.catalog import CATALOG
from nodes.collectors.base import GPUReading, MIGInstanceReading
from nodes.holds import partition_holder, with_holder_id
from nodes.models import GPU, Partition
from nodes.vocabulary import SHARE_MILLI_FULL

DEFAULT_TDP_W = 300
AMBIENT_C = 28.0
# Degrees above ambient at TDP: a board at its limit runs at roughly 75-80 C.
HEAT_AT_TDP_C = 50.0
CONTEXT_OVERHEAD_MIB = 300  # CUDA context and allocator slack of one process
IDLE_UTILIZATION_MAX_PCT = 3.0

# (load factor low, high, memory fill low, high) per kind of workload: the share of its compute
# and of its memory allowance a workload of that kind typically keeps busy.
_WORKLOAD_LOAD: dict[str, tuple[float, float, float, float]] = {
    "training": (0.82, 0.97, 0.85, 0.95),
    "batch": (0.60, 0.90, 0.60, 0.85),
    "serving": (0.35, 0.75, 0.80, 0.92),  # inference servers pre-allocate their KV cache
    "inference": (0.35, 0.75, 0.80, 0.92),
    "development": (0.03, 0.30, 0.20, 0.50),
    "ci": (0.15, 0.60, 0.30, 0.60),
    "other": (0.30, 0.80, 0.50, 0.85),
}
# Substrings of a pod's namespace/name that say what it is, checked in this order.
_NAME_HINTS: tuple[tuple[str, str], ...] = (
    ("train", "training"), ("finetune", "training"), ("pretrain", "training"),
    ("jupyter", "development"), ("notebook", "development"), ("dev/", "development"),
    ("ci/", "ci"), ("test", "ci"),
    ("batch", "batch"), ("eval", "batch"),
    ("serv", "serving"), ("infer", "inference"),
)

# Periods of the slow drift and of the short-term jitter, in seconds.
_DRIFT_PERIOD_S = 300.0
_JITTER_PERIOD_S = 30.0


class _GPURow(NamedTuple):
    """The GPU fields a reading is derived from, in _GPU_ROW_FIELDS' order."""

    pk: int
    uuid: str
    gpu_index: int  # GPU.index (a tuple has an index() already)
    model: str
    memory_mib: int
    mig_enabled: bool
    allocated_memory_mib: int


_GPU_ROW_FIELDS = ("pk", "uuid", "index", "model", "memory_mib", "mig_enabled", "allocated_memory_mib")


@dataclass(frozen=True)
class _Occupant:
    key: str  # pod "namespace/name" or "placement-<holder id>": what makes its load its own
    workload: str
    share_milli: int


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from the parts (blake2b: stable across processes, unlike hash())."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _smooth(seed: int, key: str, t: float, period_s: float) -> float:
    """Value noise in [-1, 1]: random at each period boundary, smoothly interpolated in between."""
    position = t / period_s
    bucket = math.floor(position)
    frac = position - bucket
    start = _unit(seed, key, bucket) * 2 - 1
    end = _unit(seed, key, bucket + 1) * 2 - 1
    eased = frac * frac * (3 - 2 * frac)
    return start + (end - start) * eased


def _classify(pod: str, workload_type: str | None) -> str:
    if workload_type:
        return workload_type if workload_type in _WORKLOAD_LOAD else "other"
    text = pod.lower()
    for hint, workload in _NAME_HINTS:
        if hint in text:
            return workload
    return "other"


class SimulatedCollector:
    """Readings for every GPU of a ready node in the inventory; see the module docstring.

    `seed` varies the whole fleet's behaviour (settings.TELEMETRY_SIMULATION_SEED); `clock`
    returns the aware UTC time to read at (default: now). Readings are stamped in whole seconds.
    """

    name = "simulated"

    def __init__(self, seed: int = 42, clock: Callable[[], datetime] | None = None) -> None:
        self.seed = seed
        self._clock = clock or _utc_now

    def collect(self) -> list[GPUReading]:
        """One reading per GPU of each ready node, by node name and index (two queries)."""
        ts = self._clock().replace(microsecond=0)
        # Plain rows, not model objects: building one GPU (and one Node) object per GPU was a
        # third of a 40,000-GPU poll's reading time. Ordering by node name needs only the join.
        gpus = [
            _GPURow(*values)
            for values in GPU.objects.filter(node__ready=True)
            .order_by("node__name", "index")
            .values_list(*_GPU_ROW_FIELDS)
        ]
        occupants, mig_instances = self._partitions()
        return [self._reading(gpu, occupants.get(gpu.pk, []), mig_instances.get(gpu.pk, ()), ts) for gpu in gpus]

    def _partitions(self) -> tuple[dict[int, list[_Occupant]], dict[int, tuple[MIGInstanceReading, ...]]]:
        """Occupants and MIG instances per GPU id, for the GPUs of ready nodes (one query, no IN list)."""
        occupants: dict[int, list[_Occupant]] = defaultdict(list)
        mig: dict[int, list[MIGInstanceReading]] = defaultdict(list)
        rows = (
            with_holder_id(Partition.objects.filter(gpu__node__ready=True))
            .annotate(holder_workload_type=partition_holder().workload_type_expression())
            .filter(Q(holder_id__isnull=False) | ~Q(pod="") | Q(kind="mig"))
            .values_list("gpu_id", "kind", "share_milli", "memory_mib", "mig_profile", "mig_start", "mig_size",
                         "mig_device_uuid", "pod", "holder_id", "holder_workload_type")
            .order_by("gpu_id", "slot")
        )
        for (gpu_id, kind, share_milli, memory_mib, profile, start, size, device_uuid, pod, holder_id,
             workload_type) in rows:
            if kind == "mig":
                mig[gpu_id].append(MIGInstanceReading(profile, start, size, memory_mib, device_uuid))
            if holder_id is not None or pod:
                # Part of the noise seed: another prefix would change every held partition's readings.
                key = pod or f"placement-{holder_id}"
                occupants[gpu_id].append(_Occupant(key, _classify(pod, workload_type), share_milli))
        return occupants, {gpu_id: tuple(items) for gpu_id, items in mig.items()}

    def _reading(
        self, gpu: _GPURow, occupants: list[_Occupant], mig_instances: tuple[MIGInstanceReading, ...], ts: datetime
    ) -> GPUReading:
        t = ts.timestamp()
        seed = self.seed
        model = CATALOG.get(gpu.model)
        tdp_w = float(model.tdp_w if model else DEFAULT_TDP_W)
        idle_w = tdp_w * (0.15 + 0.05 * _unit(seed, gpu.uuid, "idle-power"))

        if occupants:
            busy = 0.0
            fill_weighted = 0.0
            for occupant in occupants:
                low, high, fill_low, fill_high = _WORKLOAD_LOAD[occupant.workload]
                base = low + (high - low) * _unit(seed, occupant.key, "load")
                drift = 0.12 * _smooth(seed, f"{occupant.key}|{gpu.uuid}", t, _DRIFT_PERIOD_S)
                # Capped below 1: even a saturating job leaves gaps between kernels, and a
                # chart pinned at 100 % would hide the drift.
                load = min(0.98, max(0.0, base * (1 + drift)))
                share = occupant.share_milli / SHARE_MILLI_FULL
                busy += share * load
                fill_weighted += share * (fill_low + (fill_high - fill_low) * _unit(seed, occupant.key, "fill"))
            total_share = sum(o.share_milli for o in occupants) / SHARE_MILLI_FULL
            fill = fill_weighted / total_share if total_share else 0.0
            jitter_pct = 2.0 * _smooth(seed, gpu.uuid, t, _JITTER_PERIOD_S)
            utilization = min(100.0, max(0.0, 100.0 * min(1.0, busy) + jitter_pct))
            used_mib = int(gpu.allocated_memory_mib * fill) + CONTEXT_OVERHEAD_MIB * len(occupants)
        else:
            utilization = IDLE_UTILIZATION_MAX_PCT * (_smooth(seed, gpu.uuid, t, _JITTER_PERIOD_S) + 1) / 2
            used_mib = int(4 * _unit(seed, gpu.uuid, "idle-memory"))
        memory_used_mib = min(gpu.memory_mib, max(0, used_mib))

        power_noise_w = 0.01 * tdp_w * _smooth(seed, f"{gpu.uuid}|power", t, _JITTER_PERIOD_S)
        power_w = min(tdp_w, max(idle_w * 0.95, idle_w + (tdp_w - idle_w) * utilization / 100 + power_noise_w))
        temperature_c = AMBIENT_C + HEAT_AT_TDP_C * power_w / tdp_w + _smooth(seed, f"{gpu.uuid}|temp", t, _DRIFT_PERIOD_S)

        return GPUReading(
            gpu_uuid=gpu.uuid,
            index=gpu.gpu_index,
            ts=ts,
            utilization_pct=round(utilization, 1),
            memory_used_mib=memory_used_mib,
            memory_total_mib=gpu.memory_mib,
            power_w=round(power_w, 1),
            power_limit_w=tdp_w,
            temperature_c=round(temperature_c, 1),
            sm_clock_mhz=None,
            mig_enabled=gpu.mig_enabled,
            mig_instances=mig_instances,
            missing=frozenset({"sm_clock_mhz", "memory_reserved_mib", "processes"}),
        )
