"""What every telemetry collector returns: the Collector protocol and its reading types.

A collector reads the GPUs it can see (NVML on one node, DCGM exporter through Prometheus for the
whole cluster, or the simulator) and returns one `GPUReading` per GPU. A reading never lies about
what it could not read: a metric the driver does not support, or that failed, is None and its
field name is listed in `missing`, so that storage keeps a gap instead of a made-up zero.

This module imports no driver library and no Django model at import time: the node agent, which
runs on GPU nodes without a database, uses it too.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypedDict, runtime_checkable

from nodes.telemetry.samples import SampleIn


class ReadingMetrics(TypedDict):
    """The reading fields that may be missing (None) when the source cannot give them."""

    utilization_pct: float | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    memory_reserved_mib: int | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    sm_clock_mhz: int | None
    mig_enabled: bool | None


class SampleValues(TypedDict):
    """The subset of the metrics that GPUSample stores (and the telemetry API accepts)."""

    utilization_pct: float | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    memory_reserved_mib: int | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    sm_clock_mhz: int | None


METRIC_FIELDS: tuple[str, ...] = tuple(ReadingMetrics.__annotations__)
SAMPLE_FIELDS: tuple[str, ...] = tuple(SampleValues.__annotations__)

BYTES_PER_MIB = 1024 * 1024


class CollectorUnavailable(Exception):
    """The collector cannot read anything at all (no driver, source unreachable, bad answer).

    The message says what failed and what to check; a single GPU's or metric's failure is never
    this exception, it is a reading with `missing` fields.
    """


@dataclass(frozen=True)
class MIGInstanceReading:
    """One MIG GPU instance: its profile name ("3g.40gb"), placement in memory slices, memory.

    `start` and `size` are NVML's GPU-instance placement (the same memory-slice units as
    `nodes.catalog.MIGProfile.valid_starts`); -1 when the source could not tell.
    """

    profile: str
    start: int
    size: int
    memory_mib: int | None
    uuid: str = ""


@dataclass(frozen=True)
class ProcessReading:
    """One compute process on a GPU; `used_memory_mib` is None where the driver does not say."""

    pid: int
    used_memory_mib: int | None


@dataclass(frozen=True)
class GPUReading:
    """What one collector saw of one GPU at `ts` (aware UTC). None fields are listed in `missing`."""

    gpu_uuid: str
    index: int
    ts: datetime
    utilization_pct: float | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    sm_clock_mhz: int | None
    mig_enabled: bool | None
    mig_instances: tuple[MIGInstanceReading, ...] = ()
    processes: tuple[ProcessReading, ...] = ()
    missing: frozenset[str] = frozenset()
    # Memory the driver and firmware reserve: NVML memory info v2 reports it apart from `used`
    # (version 1, on older drivers, counts it in `used` and this is None).
    memory_reserved_mib: int | None = None
    product: str = ""  # NVML's device name, "NVIDIA H100 80GB HBM3" ("" where unknown)

    @property
    def has_metrics(self) -> bool:
        """True when at least one stored metric was read (a reading of a lost GPU has none)."""
        return any(getattr(self, name) is not None for name in SAMPLE_FIELDS)

    def sample_values(self) -> SampleValues:
        """The metrics GPUSample stores, by field name (None where missing)."""
        return SampleValues(
            utilization_pct=self.utilization_pct,
            memory_used_mib=self.memory_used_mib,
            memory_total_mib=self.memory_total_mib,
            memory_reserved_mib=self.memory_reserved_mib,
            power_w=self.power_w,
            power_limit_w=self.power_limit_w,
            temperature_c=self.temperature_c,
            sm_clock_mhz=self.sm_clock_mhz,
        )

    @property
    def reported_processes(self) -> tuple[tuple[int, int | None], ...] | None:
        """The compute processes as (pid, used MiB) pairs; None when they could not be read."""
        if "processes" in self.missing:
            return None
        return tuple((process.pid, process.used_memory_mib) for process in self.processes)

    def to_sample(self) -> SampleIn:
        """This reading as the storage service's input (nodes.telemetry.samples.SampleIn)."""
        return SampleIn(gpu_uuid=self.gpu_uuid, ts=self.ts, processes=self.reported_processes, **self.sample_values())


def empty_reading(gpu_uuid: str, index: int, ts: datetime) -> GPUReading:
    """A reading of a GPU whose metrics could not be read at all: every metric missing."""
    return GPUReading(
        gpu_uuid=gpu_uuid,
        index=index,
        ts=ts,
        utilization_pct=None,
        memory_used_mib=None,
        memory_total_mib=None,
        power_w=None,
        power_limit_w=None,
        temperature_c=None,
        sm_clock_mhz=None,
        mig_enabled=None,
        missing=frozenset(METRIC_FIELDS) | {"processes"},
    )


@runtime_checkable
class Collector(Protocol):
    """A source of GPU readings. `name` becomes GPUSample.source ("nvml", "dcgm", "simulated")."""

    name: str

    def collect(self) -> list[GPUReading]:
        """Read every GPU the source sees now; raise CollectorUnavailable when it sees nothing."""
        ...

