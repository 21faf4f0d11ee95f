"""nodes.telemetry.ingest.ingest_samples: the good samples of a batch stored, the bad ones reported one by
one, duplicates, latest values on GPU rows."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nodes.models import GPU, GPUSample
from nodes.telemetry.ingest import IngestResult, ingest_samples
from nodes.telemetry.partitions import ensure_partitions
from nodes.telemetry.samples import SampleIn
from nodes.telemetry.validation import TelemetryRejected
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def sample(uuid: str = "GPU-n1-0", ts: datetime = NOW, **metrics) -> SampleIn:
    values = {"utilization_pct": 50.0, "memory_used_mib": 1024, "power_w": 200.0, "temperature_c": 60.0}
    return SampleIn(gpu_uuid=uuid, ts=ts, **{**values, **metrics})


@pytest.fixture
def n1(db):
    return make_node("n1", gpu_count=2)


@pytest.fixture
def n2(db):
    return make_node("n2", gpu_count=1)


def test_it_stores_every_sample_with_its_source(n1):
    batch = [sample(ts=NOW - timedelta(seconds=30)), sample(ts=NOW, memory_total_mib=81920, sm_clock_mhz=1980)]

    result = ingest_samples(batch, node=n1, source="nvml", now=NOW)

    assert result == IngestResult(stored=2, duplicates=0)
    stored = list(GPUSample.objects.order_by("ts").values("ts", "memory_total_mib", "sm_clock_mhz", "source"))
    assert stored == [
        {"ts": NOW - timedelta(seconds=30), "memory_total_mib": None, "sm_clock_mhz": None, "source": "nvml"},
        {"ts": NOW, "memory_total_mib": 81920, "sm_clock_mhz": 1980, "source": "nvml"},
    ]


def test_it_ignores_a_resent_batch_exactly_once(n1):
    batch = [sample("GPU-n1-0"), sample("GPU-n1-1"), sample("GPU-n1-0", ts=NOW - timedelta(seconds=30))]
    assert ingest_samples(batch, now=NOW) == IngestResult(stored=3, duplicates=0)

    again = ingest_samples(batch, now=NOW)

    assert again == IngestResult(stored=0, duplicates=3)
    assert GPUSample.objects.count() == 3


def test_it_counts_a_partly_new_batch(n1):
    ingest_samples([sample(ts=NOW - timedelta(seconds=30))], now=NOW)

    result = ingest_samples([sample(ts=NOW - timedelta(seconds=30)), sample(ts=NOW)], now=NOW)

    assert result == IngestResult(stored=1, duplicates=1)


def test_it_stores_a_sample_repeated_inside_one_batch_once(n1):
    result = ingest_samples([sample(utilization_pct=10.0), sample(utilization_pct=10.0)], now=NOW)

    assert result == IngestResult(stored=1, duplicates=1)
    assert GPUSample.objects.count() == 1


def test_it_accepts_gpus_of_several_nodes_without_a_node(n1, n2):
    result = ingest_samples([sample("GPU-n1-0"), sample("GPU-n2-0")], now=NOW)

    assert result.stored == 2


def test_it_accepts_an_empty_batch(n1):
    assert ingest_samples([], node=n1, now=NOW) == IngestResult(stored=0, duplicates=0)


# --- latest values on GPU rows ------------------------------------------------------------------


def latest(uuid: str) -> dict:
    return GPU.objects.values("utilization_pct", "memory_used_mib", "power_w", "temperature_c", "sampled_at").get(
        uuid=uuid
    )


def test_it_copies_each_gpus_newest_sample_of_the_batch_onto_its_row(n1):
    # Out of order on purpose: the newest (NOW) sits in the middle.
    ingest_samples(
        [
            sample(ts=NOW - timedelta(seconds=60), utilization_pct=10.0),
            sample(ts=NOW, utilization_pct=30.0, memory_used_mib=2048, power_w=250.5, temperature_c=70.0),
            sample(ts=NOW - timedelta(seconds=30), utilization_pct=20.0),
        ],
        now=NOW,
    )

    assert latest("GPU-n1-0") == {
        "utilization_pct": 30.0, "memory_used_mib": 2048, "power_w": 250.5, "temperature_c": 70.0, "sampled_at": NOW,
    }
    assert latest("GPU-n1-1")["sampled_at"] is None  # not in the batch: untouched


def test_it_never_lets_an_older_sample_overwrite_newer_latest_values(n1):
    ingest_samples([sample(ts=NOW, utilization_pct=80.0)], now=NOW)

    # A late batch (an agent flushing its buffer) with an older sample, and one for the other GPU.
    result = ingest_samples(
        [sample("GPU-n1-0", ts=NOW - timedelta(minutes=5), utilization_pct=5.0), sample("GPU-n1-1", ts=NOW)], now=NOW
    )

    assert result.stored == 2  # the old sample is still kept for the charts
    assert latest("GPU-n1-0")["utilization_pct"] == 80.0
    assert latest("GPU-n1-0")["sampled_at"] == NOW
    assert latest("GPU-n1-1")["sampled_at"] == NOW


def test_it_replaces_latest_values_with_a_newer_sample_including_its_gaps(n1):
    ingest_samples([sample(ts=NOW - timedelta(seconds=30), power_w=300.0)], now=NOW)

    ingest_samples([sample(ts=NOW, utilization_pct=12.5, power_w=None)], now=NOW)

    # The newer sample could not read power: the row says "unknown", not the 30 s old figure.
    assert latest("GPU-n1-0")["utilization_pct"] == 12.5
    assert latest("GPU-n1-0")["power_w"] is None
    assert latest("GPU-n1-0")["sampled_at"] == NOW


def test_the_database_guards_latest_values_even_when_the_read_was_stale(n1):
    """Two batches racing: the row became newer after ingest read it; the UPDATE's WHERE still refuses."""
    from nodes.telemetry.storage import update_latest_values

    GPU.objects.filter(uuid="GPU-n1-0").update(sampled_at=NOW, utilization_pct=99.0)
    older = sample(ts=NOW - timedelta(seconds=30), utilization_pct=1.0)
    gpu_id = GPU.objects.get(uuid="GPU-n1-0").pk

    update_latest_values({gpu_id: older})  # what ingest would run had it read sampled_at=None

    assert latest("GPU-n1-0")["utilization_pct"] == 99.0


def test_it_uses_the_same_few_queries_for_one_gpu_and_for_forty(db, monkeypatch):
    make_node("big", gpu_count=40)
    # PostgreSQL: a process makes a time partition once, then knows it (remembered at commit, which
    # a test's transaction never reaches): count the queries of a process that knows them.
    ensure_partitions([NOW - timedelta(seconds=60), NOW])
    monkeypatch.setattr("nodes.telemetry.ingest.ensure_partitions", lambda times: 0)

    def queries(uuids: list[str], ts: datetime) -> int:
        with CaptureQueriesContext(connection) as captured:
            result = ingest_samples([sample(uuid, ts=ts) for uuid in uuids], now=NOW)
        # Counted queries are only worth comparing when the batch was really stored.
        assert result == IngestResult(stored=len(uuids), duplicates=0)
        return len(captured)

    one = queries(["GPU-big-0"], NOW - timedelta(seconds=60))
    forty = queries([f"GPU-big-{i}" for i in range(40)], NOW)

    assert one == forty
    assert GPU.objects.filter(sampled_at=NOW).count() == 40
    # resolve + INSERT + UPDATE (+ SAVEPOINT/RELEASE inside the test's transaction); PostgreSQL
    # COPYs instead of INSERT (not a query Django sees) inside a savepoint of its own.
    assert forty <= (6 if connection.vendor == "postgresql" else 5)


# --- refusals: the bad sample reported, the good ones stored -----------------------------------


def assert_nothing_stored() -> None:
    assert GPUSample.objects.count() == 0
    assert not GPU.objects.filter(sampled_at__isnull=False).exists()


@pytest.mark.parametrize(
    "bad, field, message",
    [
        (sample("GPU-nope"), "gpu_uuid", "Unknown GPU 'GPU-nope'."),
        (sample("GPU-n2-0"), "gpu_uuid", "GPU 'GPU-n2-0' is not a GPU of node 'n1'."),
        (sample(ts=NOW + timedelta(minutes=10)), "ts", "is 600 s in the future (allowed skew 120 s)"),
        (sample(ts=datetime(2026, 3, 2, 12, 0)), "ts", "must have a timezone (an ISO 8601 time with Z or an offset)"),
        (sample(ts=NOW - timedelta(days=31)), "ts", "is older than the rollup retention (30 days)"),
        (sample(utilization_pct=100.5), "utilization_pct", "must be between 0 and 100; got 100.5"),
        (sample(memory_used_mib=-1), "memory_used_mib", f"must be between 0 and {2**31 - 1}; got -1"),
        (sample(power_w=-0.5), "power_w", "must be between 0 and 2000; got -0.5"),
        (sample(temperature_c=151.0), "temperature_c", "must be between -50 and 150; got 151.0"),
        (sample(power_w=float("nan")), "power_w", "must be a finite number; got nan"),
        (sample(utilization_pct=True), "utilization_pct", "must be a finite number; got True"),
        (sample(temperature_c=float("-inf")), "temperature_c", "must be a finite number; got -inf"),
        # Physical limits: none is past any GPU's, then those of n1's H100-SXM5-80GB with 81920 MiB.
        (sample(power_w=1.7e308), "power_w", "must be between 0 and 2000; got 1.7e+308"),
        (sample(memory_used_mib=10**400), "memory_used_mib", f"must be between 0 and {2**31 - 1}; got a number of about 400 digits"),
        (sample(sm_clock_mhz=3501), "sm_clock_mhz", "must be between 0 and 3500; got 3501"),
        (sample(power_w=1050.5), "power_w", "must be at most 1050, 1.5 × the 700 W TDP of H100-SXM5-80GB; got 1050.5"),
        (sample(memory_used_mib=81921), "memory_used_mib", "must be at most 81920, the GPU's memory (81920 MiB); got 81921"),
        (sample(memory_total_mib=163840), "memory_total_mib", "must be at most 81920, the GPU's memory (81920 MiB); got 163840"),
        (sample(sm_clock_mhz=2476), "sm_clock_mhz", "must be at most 2475, 1.25 × the 1980 MHz maximum clock of H100-SXM5-80GB; got 2476"),
        (sample(memory_used_mib=4096, memory_total_mib=2048), "memory_used_mib", "must not exceed memory_total_mib (2048); got 4096"),
    ],
)
def test_it_refuses_the_bad_sample_and_stores_the_others(n1, n2, settings, bad, field, message):
    settings.TELEMETRY_ROLLUP_RETENTION_D = 30
    settings.TELEMETRY_MAX_FUTURE_SKEW_S = 120
    batch = [sample("GPU-n1-0", ts=NOW - timedelta(seconds=30)), sample("GPU-n1-1"), bad]

    result = ingest_samples(batch, node=n1, now=NOW)

    assert (result.stored, result.duplicates, result.errors) == (2, 0, {"2": {field: [message]}})
    assert result.retry == ((2,) if message.startswith("Unknown GPU") else ())
    assert sorted(GPUSample.objects.values_list("gpu__uuid", flat=True)) == ["GPU-n1-0", "GPU-n1-1"]


def test_it_accepts_every_metric_at_its_gpus_limit(n1):
    at_limits = sample(memory_used_mib=81920, memory_total_mib=81920, power_w=1050.0, sm_clock_mhz=2475)

    assert ingest_samples([at_limits], node=n1, now=NOW).stored == 1


def test_the_limits_follow_the_gpus_catalog_model(db):
    node = make_node("l4", gpu_model="L4", gpu_count=1, gpu_memory_mib=23034)
    ok = sample("GPU-l4-0", power_w=108.0, memory_used_mib=23034, sm_clock_mhz=2550)

    assert ingest_samples([ok], node=node, now=NOW).stored == 1
    result = ingest_samples([sample("GPU-l4-0", ts=NOW - timedelta(seconds=30), power_w=108.5)], node=node, now=NOW)
    assert (result.stored, result.errors) == (
        0, {"0": {"power_w": ["must be at most 108, 1.5 × the 72 W TDP of L4; got 108.5"]}}
    )


def test_a_gpu_of_no_catalog_model_is_held_to_the_bounds_of_any_gpu(db):
    node = make_node("odd", gpu_model="", gpu_count=1, gpu_memory_mib=4096)
    ingest_samples([sample("GPU-odd-0", power_w=2000.0, sm_clock_mhz=3500, memory_used_mib=4096)], now=NOW)

    result = ingest_samples([sample("GPU-odd-0", ts=NOW - timedelta(seconds=30), memory_used_mib=4097)], node=node, now=NOW)

    assert result.errors == {"0": {"memory_used_mib": ["must be at most 4096, the GPU's memory (4096 MiB); got 4097"]}}


def test_it_reports_every_bad_sample_and_field_at_once(n1):
    batch = [sample(), sample("GPU-x", ts=NOW + timedelta(hours=1)), sample(utilization_pct=-1.0, temperature_c=-60.0)]

    result = ingest_samples(batch, node=n1, now=NOW)

    assert result.errors == {
        "1": {"gpu_uuid": ["Unknown GPU 'GPU-x'."], "ts": ["is 3600 s in the future (allowed skew 120 s)"]},
        "2": {
            "utilization_pct": ["must be between 0 and 100; got -1.0"],
            "temperature_c": ["must be between -50 and 150; got -60.0"],
        },
    }
    assert result.retry == ()  # sample 1's clock is wrong too: sending it again would not help
    assert result.stored == 1


def test_it_accepts_a_timestamp_exactly_at_the_allowed_skew(n1, settings):
    settings.TELEMETRY_MAX_FUTURE_SKEW_S = 120

    assert ingest_samples([sample(ts=NOW + timedelta(seconds=120))], now=NOW).stored == 1
    assert ingest_samples([sample(ts=NOW + timedelta(seconds=121))], now=NOW).refused == 1


def test_it_names_samples_by_the_indexes_the_caller_gives_and_keeps_its_refusals(n1):
    malformed = {"3": {"ts": ["Datetime has wrong format."]}}
    result = ingest_samples(
        [sample(), sample("GPU-n1-1", power_w=-1.0)], node=n1, now=NOW, indexes=[1, 4], refused=malformed
    )
    assert result.errors == {**malformed, "4": {"power_w": ["must be between 0 and 2000; got -1.0"]}}
    assert list(result.errors) == ["3", "4"] and result.stored == 1


def test_it_rejects_an_oversized_batch_naming_the_limit(n1, settings):
    settings.TELEMETRY_MAX_BATCH = 3
    batch = [sample(ts=NOW - timedelta(seconds=30 * i)) for i in range(4)]

    with pytest.raises(TelemetryRejected) as caught:
        ingest_samples(batch, now=NOW)

    assert caught.value.errors == {"samples": ["At most 3 samples per batch (TELEMETRY_MAX_BATCH); got 4."]}
    assert_nothing_stored()
    assert ingest_samples(batch[:3], now=NOW).stored == 3


def test_the_ingest_benchmark_runs_on_its_own_database_and_reports_the_figures():
    """bench/ingest.py end to end at a tiny size, in a subprocess: it makes and drops its own database."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "bench/ingest.py", "--gpus", "20", "--intervals", "2", "--json"],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["gpus"], result["nodes"], result["intervals"]) == (20, 3, 2)  # 8 + 8 + 4 GPUs
    # warm-up + 2 through the API + 2 through the service, less one refused sample of node 0 (one
    # node in 10 sends a bad one, answered 207) in each of the 3 API intervals
    assert result["bad_batches_per_interval"] == 1
    assert result["stored_samples"] == 20 * 5 - 3
    for key in ("samples_per_s", "cpu_seconds_per_interval", "batch_p50_ms", "batch_p99_ms"):
        assert result[key] > 0, key
    assert result["batch_p50_ms"] <= result["batch_p99_ms"]
    assert result["database"].split()[0] in {"sqlite", "postgresql"}


def test_stored_values_and_times_read_back_exactly(n1):
    # PostgreSQL gets an agent's rows as JSON text (nodes.telemetry.storage._json_rows): every float
    # must read back as the same double, a time in another offset as the same instant, to the microsecond.
    ts = datetime(2026, 3, 2, 13, 59, 59, 123457, tzinfo=timezone(timedelta(hours=2)))  # 11:59:59.123457 UTC
    odd = {"utilization_pct": 33.333333333333336, "power_w": 0.1 + 0.2, "temperature_c": -12.000000000000002,
           "power_limit_w": 699.9999999999999, "memory_used_mib": 81919, "memory_reserved_mib": 0}
    result = ingest_samples([sample(ts=ts, **odd, processes=((1, None), (2**31 - 1, 0)))], node=n1, now=NOW)

    assert result == IngestResult(stored=1, duplicates=0)
    stored = GPUSample.objects.values(*odd, "ts", "memory_total_mib").get()
    assert stored == {**odd, "ts": ts, "memory_total_mib": None}
    gpu = GPU.objects.values("sampled_at", "processes", *odd).get(uuid="GPU-n1-0")
    assert gpu == {**odd, "sampled_at": ts, "processes": [[1, None], [2**31 - 1, 0]]}
