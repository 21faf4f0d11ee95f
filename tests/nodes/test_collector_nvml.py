"""NVMLCollector against a fake at the pynvml function boundary.

The fake replaces exactly the pynvml functions the collector calls, answering from a table of
GPUs with the same shapes the real binding returns (ctypes-like structs with the same attribute
names, MIG profile names as bytes, NVMLError subclasses chosen by error code). The table has a
healthy H100, a MIG A100 with instances, a GPU without power sensors (NOT_SUPPORTED), a GPU that
answers its UUID and then falls off the bus (GPU_IS_LOST), and one whose handle is already lost.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from nodes.collectors.base import METRIC_FIELDS, CollectorUnavailable, MIGInstanceReading, ProcessReading
from nodes.collectors.nvml import NVMLCollector

MIB = 1024 * 1024
NOW = datetime(2025, 3, 1, 12, 0, 30, 123456, tzinfo=UTC)


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeGPUInstance:
    gi_id: int
    profile_id: int
    profile_name: bytes
    profile_memory_mb: int
    start: int
    size: int


@dataclass
class FakeMIGDevice:
    uuid: str
    gpu_instance: FakeGPUInstance
    memory_total_mib: int
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGPU:
    uuid: str
    index: int
    utilization: int | None = 0
    memory_used_mib: int = 0  # as version 2 reports it: without the reserved memory
    memory_total_mib: int = 81559
    memory_reserved_mib: int = 480
    name: bytes | str = "NVIDIA H100 80GB HBM3"
    power_mw: int | None = 100_000
    power_limit_mw: int | None = 700_000
    temperature_c: int = 40
    sm_clock_mhz: int = 1980
    mig_mode: int = pynvml.NVML_DEVICE_MIG_DISABLE
    mig_devices: list[FakeMIGDevice | None] = field(default_factory=list)
    processes: list[tuple[int, int | None]] | None = field(default_factory=list)  # None: NO_PERMISSION
    lost_after_uuid: bool = False
    handle_lost: bool = False
    calls: list[str] = field(default_factory=list)  # pynvml functions asked about this GPU


class FakeNVML:
    """The pynvml functions NVMLCollector uses, answering from `gpus`; counts calls per function."""

    def __init__(self, gpus: list[FakeGPU], init_error: int | None = None, memory_v2: bool = True) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.memory_v2 = memory_v2  # False: a driver before nvmlDeviceGetMemoryInfo_v2
        self.initialised = 0
        self.calls: dict[str, int] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNVML:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _gpu(self, handle: Any, name: str) -> FakeGPU:
        self._count(name)
        assert isinstance(handle, FakeGPU), f"{name} got a MIG handle"
        handle.calls.append(name)
        if handle.lost_after_uuid and name != "nvmlDeviceGetUUID":
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle

    # --- lifecycle
    def nvmlInit(self) -> None:
        self._count("nvmlInit")
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._count("nvmlShutdown")
        assert self.initialised > 0, "shutdown without init"
        self.initialised -= 1

    def _require_init(self) -> None:
        if self.initialised <= 0:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)

    # --- devices
    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        self._require_init()
        gpu = self.gpus[index]
        if gpu.handle_lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._count("nvmlDeviceGetUUID")
        return handle.uuid  # both GPUs and MIG devices

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetIndex").index

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        return [gpu.mig_mode, gpu.mig_mode]

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        if gpu.utilization is None or gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.utilization, memory=gpu.utilization // 2)

    def nvmlDeviceGetName(self, handle: Any) -> bytes | str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> SimpleNamespace:
        if version is not None:
            # pynvml looks the _v2 function up in the driver: FUNCTION_NOT_FOUND on an old one.
            assert version == pynvml.nvmlMemory_v2
            self._count("nvmlDeviceGetMemoryInfo_v2")
            if not self.memory_v2:
                raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if isinstance(handle, FakeMIGDevice):
            self._count("nvmlDeviceGetMemoryInfo")
            total = handle.memory_total_mib * MIB
            return SimpleNamespace(total=total, used=0, free=total, reserved=0)
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        used = gpu.memory_used_mib * MIB + 512 * 1024  # half a MiB more: MiB are rounded down
        total, reserved = gpu.memory_total_mib * MIB, gpu.memory_reserved_mib * MIB
        if version is None:  # version 1: reserved memory counts as used
            return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
        return SimpleNamespace(version=version, total=total, reserved=reserved, used=used, free=total - used - reserved)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetPowerUsage")
        if gpu.power_mw is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit")
        if gpu.power_limit_mw is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        assert clock_type == pynvml.NVML_CLOCK_SM
        return self._gpu(handle, "nvmlDeviceGetClockInfo").sm_clock_mhz

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        if isinstance(handle, FakeMIGDevice):
            self._count("nvmlDeviceGetComputeRunningProcesses")
            found = handle.processes
        else:
            found = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses").processes
            if found is None:
                raise nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in found]

    # --- MIG
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> FakeMIGDevice:
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(gpu.mig_devices) or gpu.mig_devices[index] is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return gpu.mig_devices[index]

    def nvmlDeviceGetGpuInstanceId(self, mig: FakeMIGDevice) -> int:
        self._count("nvmlDeviceGetGpuInstanceId")
        return mig.gpu_instance.gi_id

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> FakeGPUInstance:
        gpu = self._gpu(handle, "nvmlDeviceGetGpuInstanceById")
        return next(m.gpu_instance for m in gpu.mig_devices if m is not None and m.gpu_instance.gi_id == gi_id)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: FakeGPUInstance) -> SimpleNamespace:
        self._count("nvmlGpuInstanceGetInfo")
        return SimpleNamespace(
            id=gpu_instance.gi_id,
            profileId=gpu_instance.profile_id,
            placement=SimpleNamespace(start=gpu_instance.start, size=gpu_instance.size),
        )

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: Any, profile_id: int) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlDeviceGetGpuInstanceProfileInfoById")
        instance = next(m.gpu_instance for m in gpu.mig_devices if m is not None and m.gpu_instance.profile_id == profile_id)
        return SimpleNamespace(id=profile_id, name=instance.profile_name, memorySizeMB=instance.profile_memory_mb)


def a100_mig_gpu() -> FakeGPU:
    """An A100-40GB in MIG mode: 3g.20gb at 0 (two compute instances), 1g.5gb at 4, 1g.5gb at 6."""
    gi_3g = FakeGPUInstance(gi_id=1, profile_id=9, profile_name=b"MIG 3g.20gb", profile_memory_mb=19968, start=0, size=4)
    gi_1g_a = FakeGPUInstance(gi_id=7, profile_id=19, profile_name=b"MIG 1g.5gb", profile_memory_mb=4864, start=4, size=1)
    gi_1g_b = FakeGPUInstance(gi_id=8, profile_id=19, profile_name=b"MIG 1g.5gb", profile_memory_mb=4864, start=6, size=1)
    return FakeGPU(
        uuid="GPU-a100-mig",
        index=1,
        utilization=55,  # NVML would refuse; the collector must not even report it
        memory_used_mib=9000,
        memory_total_mib=40960,
        power_mw=180_250,
        power_limit_mw=400_000,
        temperature_c=47,
        sm_clock_mhz=1410,
        mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE,
        mig_devices=[
            # Listed out of placement order, with an empty slot: order and gaps must not matter.
            FakeMIGDevice("MIG-1g-b", gi_1g_b, 4864),
            None,
            FakeMIGDevice("MIG-3g-ci0", gi_3g, 19968, processes=[(300, 6 * 1024 * MIB)]),
            FakeMIGDevice("MIG-3g-ci1", gi_3g, 19968, processes=[(301, None)]),
            FakeMIGDevice("MIG-1g-a", gi_1g_a, 4864),
        ],
        processes=None,  # unprivileged: the parent handle refuses per-process data
    )


@pytest.fixture
def fake_nvml(monkeypatch) -> FakeNVML:
    gpus = [
        FakeGPU(
            uuid="GPU-h100-ok", index=0, utilization=37, memory_used_mib=20480, memory_total_mib=81559,
            power_mw=312_500, power_limit_mw=700_000, temperature_c=54, sm_clock_mhz=1980,
            processes=[(101, 10 * 1024 * MIB), (102, None)],
        ),
        a100_mig_gpu(),
        FakeGPU(uuid="GPU-no-power-sensor", index=2, utilization=5, memory_used_mib=3, memory_total_mib=23034,
                power_mw=None, power_limit_mw=None, temperature_c=33, sm_clock_mhz=210),
        FakeGPU(uuid="GPU-fell-off-the-bus", index=3, lost_after_uuid=True),
        FakeGPU(uuid="GPU-handle-lost", index=4, handle_lost=True),
    ]
    return FakeNVML(gpus).install(monkeypatch)


def collect(installed: FakeNVML) -> dict[str, Any]:
    """Readings by UUID from a collector talking to `installed` (passed to make the dependency visible)."""
    assert installed.initialised == 0
    readings = NVMLCollector(clock=lambda: NOW).collect()
    return {reading.gpu_uuid: reading for reading in readings}


def test_it_reads_a_healthy_gpu_field_by_field(fake_nvml):
    reading = collect(fake_nvml)["GPU-h100-ok"]

    assert reading.index == 0
    assert reading.ts == datetime(2025, 3, 1, 12, 0, 30, tzinfo=UTC)  # whole seconds
    assert reading.utilization_pct == 37.0
    assert reading.memory_used_mib == 20480  # 20480 MiB + 0.5 MiB in bytes, rounded down
    assert reading.memory_total_mib == 81559
    assert reading.memory_reserved_mib == 480  # apart from used (memory info version 2)
    assert reading.product == "NVIDIA H100 80GB HBM3"
    assert reading.power_w == 312.5  # 312500 mW
    assert reading.power_limit_w == 700.0
    assert reading.temperature_c == 54.0
    assert reading.sm_clock_mhz == 1980
    assert reading.mig_enabled is False
    assert reading.mig_instances == ()
    assert reading.processes == (ProcessReading(101, 10240), ProcessReading(102, None))
    assert reading.missing == frozenset()
    assert reading.has_metrics


def test_a_mig_gpu_reports_its_instances_and_no_utilization(fake_nvml):
    reading = collect(fake_nvml)["GPU-a100-mig"]

    assert reading.mig_enabled is True
    # NVML does not support utilization on a MIG-enabled GPU: missing, and not asked.
    assert reading.utilization_pct is None
    assert "utilization_pct" in reading.missing
    assert "nvmlDeviceGetUtilizationRates" not in fake_nvml.gpus[1].calls
    # One entry per GPU instance (two compute instances of the 3g.20gb are one), by placement.
    assert reading.mig_instances == (
        MIGInstanceReading(profile="3g.20gb", start=0, size=4, memory_mib=19968, uuid="MIG-3g-ci0"),
        MIGInstanceReading(profile="1g.5gb", start=4, size=1, memory_mib=4864, uuid="MIG-1g-a"),
        MIGInstanceReading(profile="1g.5gb", start=6, size=1, memory_mib=4864, uuid="MIG-1g-b"),
    )
    # The parent handle refused process data (unprivileged); the MIG devices gave it.
    assert reading.processes == (ProcessReading(300, 6144), ProcessReading(301, None))
    assert "processes" not in reading.missing
    assert (reading.memory_used_mib, reading.memory_total_mib) == (9000, 40960)
    assert (reading.power_w, reading.power_limit_w, reading.temperature_c, reading.sm_clock_mhz) == (180.25, 400.0, 47.0, 1410)
    assert reading.missing == frozenset({"utilization_pct"})


def test_a_metric_the_board_does_not_support_is_missing_and_the_rest_is_read(fake_nvml):
    reading = collect(fake_nvml)["GPU-no-power-sensor"]

    assert reading.power_w is None and reading.power_limit_w is None
    assert reading.missing == frozenset({"power_w", "power_limit_w"})
    assert reading.utilization_pct == 5.0
    assert reading.memory_used_mib == 3 and reading.memory_total_mib == 23034
    assert reading.temperature_c == 33.0 and reading.sm_clock_mhz == 210


def test_a_gpu_lost_after_its_uuid_yields_a_reading_with_everything_missing(fake_nvml):
    reading = collect(fake_nvml)["GPU-fell-off-the-bus"]

    assert reading.index == 3  # the enumeration index stands in for the one NVML refused
    assert reading.ts == datetime(2025, 3, 1, 12, 0, 30, tzinfo=UTC)
    for name in METRIC_FIELDS:
        assert getattr(reading, name) is None, name
    assert reading.missing >= set(METRIC_FIELDS) | {"mig_instances", "processes"}
    assert not reading.has_metrics
    # After the first GPU_IS_LOST nothing more is asked of it (each call could hang on the driver).
    assert fake_nvml.gpus[3].calls == ["nvmlDeviceGetIndex"]


def test_a_gpu_whose_handle_is_lost_is_skipped_and_the_others_are_still_read(fake_nvml):
    readings = NVMLCollector(clock=lambda: NOW).collect()

    assert [r.gpu_uuid for r in readings] == ["GPU-h100-ok", "GPU-a100-mig", "GPU-no-power-sensor", "GPU-fell-off-the-bus"]


def test_collect_initialises_and_shuts_nvml_down_around_one_collection(fake_nvml):
    NVMLCollector(clock=lambda: NOW).collect()

    assert fake_nvml.calls["nvmlInit"] == 1 and fake_nvml.calls["nvmlShutdown"] == 1
    assert fake_nvml.initialised == 0


def test_as_a_context_manager_it_keeps_nvml_open_across_collections(fake_nvml):
    with NVMLCollector(clock=lambda: NOW) as collector:
        collector.collect()
        collector.collect()
        assert fake_nvml.initialised == 1

    assert fake_nvml.calls["nvmlInit"] == 1 and fake_nvml.calls["nvmlShutdown"] == 1
    assert fake_nvml.initialised == 0


def test_a_machine_without_the_driver_raises_collector_unavailable_with_a_clear_message(monkeypatch):
    FakeNVML([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)

    with pytest.raises(CollectorUnavailable) as raised:
        NVMLCollector().collect()

    message = str(raised.value)
    assert "NVML could not be initialised" in message
    assert "NVML Shared Library Not Found" in message
    assert "libnvidia-ml.so.1" in message


def test_a_failing_device_count_raises_collector_unavailable_and_still_shuts_down(monkeypatch):
    fake = FakeNVML([]).install(monkeypatch)

    def broken_count() -> int:
        raise nvml_error(pynvml.NVML_ERROR_UNKNOWN)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", broken_count)

    with pytest.raises(CollectorUnavailable, match="could not count the GPUs"):
        NVMLCollector().collect()
    assert fake.initialised == 0


def test_a_driver_too_old_for_the_process_query_only_loses_the_processes(fake_nvml, monkeypatch):
    def mismatch(handle: Any) -> list[Any]:
        raise pynvml.NVMLLibraryMismatchError("driver too old for nvmlDeviceGetComputeRunningProcesses_v3")

    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", mismatch)

    reading = collect(fake_nvml)["GPU-h100-ok"]

    assert reading.processes == ()
    assert reading.missing == frozenset({"processes"})
    assert reading.utilization_pct == 37.0


def test_a_driver_without_memory_info_v2_is_read_with_version_1_whose_used_counts_the_reserved(monkeypatch):
    gpus = [FakeGPU(uuid="GPU-old-driver", index=0, memory_used_mib=9421, memory_reserved_mib=480, name=b"Tesla T4")]
    nvml = FakeNVML(gpus, memory_v2=False).install(monkeypatch)
    collector = NVMLCollector(clock=lambda: NOW)

    with collector:
        first = collector.collect()[0]
        collector.collect()

    assert first.memory_used_mib == 9901  # 9421 + 480: version 1 cannot tell them apart
    assert first.memory_reserved_mib is None and "memory_reserved_mib" in first.missing
    assert first.product == "Tesla T4"  # bytes from an older binding
    assert nvml.calls["nvmlDeviceGetMemoryInfo_v2"] == 1  # asked once: the driver lacks it


def test_reserved_memory_reaches_the_sample(fake_nvml):
    sample = collect(fake_nvml)["GPU-h100-ok"].to_sample()
    assert (sample.memory_used_mib, sample.memory_reserved_mib, sample.power_limit_w) == (20480, 480, 700.0)
    assert sample.processes == ((101, 10240), (102, None))
