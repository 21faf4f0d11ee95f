"""NVMLCollector against a fake at the pynvml function boundary.

The fake (tests/nodes/fake_nvml.py) replaces exactly the pynvml functions the collector calls.
The table has a healthy H100, a MIG A100 with instances, a GPU without power sensors (NOT_SUPPORTED), a GPU that
answers its UUID and then falls off the bus (GPU_IS_LOST), and one whose handle is already lost.
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pynvml
import pytest

from nodes.collectors.base import METRIC_FIELDS, CollectorUnavailable, MIGInstanceReading, ProcessReading
from nodes.collectors.nvml import NVMLCollector
from tests.nodes.fake_nvml import MIB, FakeGPU, FakeNVML, a100_mig_gpu, nvml_error

NOW = datetime(2025, 3, 1, 12, 0, 30, 123456, tzinfo=UTC)


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
