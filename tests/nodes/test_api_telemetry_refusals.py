"""`POST /api/v1/telemetry/` refusals: a bad sample is named in a 207 and its neighbours stored; a bad
batch is a 400 and nothing is stored (regressions of issue 19: one bad sample refused its batch)."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from nodes.authentication import issue_agent_token
from nodes.models import GPU, GPUSample, Node
from tests.nodes.factories import make_node
from tests.nodes.test_api_telemetry import batch, post, sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def n1(db) -> Node:
    return make_node("n1", gpu_count=2)


@pytest.fixture
def n2(db) -> Node:
    return make_node("n2", gpu_count=1)


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


# --- bad samples: 207 naming each (the good ones stored); bad batches: 400, nothing stored ---------

LIMIT = 2**31 - 1


def with_sample(**overrides: Any) -> dict[str, Any]:
    return batch(sample("GPU-n1-0", seconds_ago=30), sample("GPU-n1-1", **overrides))


def without(key: str) -> dict[str, Any]:
    body = with_sample()
    del body["samples"][1][key]
    return body


# (case, body (built when the test runs: timestamps are relative to now), field of sample 1, regex)
BAD_SAMPLES: list[tuple[str, Callable[[], Any], str, str]] = [
    ("utilization as text", lambda: with_sample(utilization_pct="high"), "utilization_pct", "number is required, not str"),
    ("number in a string", lambda: with_sample(utilization_pct="50"), "utilization_pct", "not str"),
    ("boolean memory", lambda: with_sample(memory_used_mib=True), "memory_used_mib", "not bool"),
    ("fractional memory", lambda: with_sample(memory_used_mib=1.5), "memory_used_mib", "whole number"),
    ("integral float memory", lambda: with_sample(memory_used_mib=12.0), "memory_used_mib", "whole number"),
    ("memory as a list", lambda: with_sample(memory_total_mib=[1]), "memory_total_mib", "not list"),
    ("utilization over 100", lambda: with_sample(utilization_pct=100.1), "utilization_pct", "between 0 and 100; got 100.1"),
    ("negative utilization", lambda: with_sample(utilization_pct=-1), "utilization_pct", "between 0 and 100; got -1"),
    ("negative memory", lambda: with_sample(memory_used_mib=-5), "memory_used_mib", "between 0 and"),
    ("memory past int32", lambda: with_sample(memory_used_mib=LIMIT + 1), "memory_used_mib", str(LIMIT)),
    ("huge integer", lambda: with_sample(power_w=10**400), "power_w", "a number of about 400 digits"),
    ("negative power", lambda: with_sample(power_w=-0.1), "power_w", "between 0 and 2000"),
    ("power 1.7e308", lambda: with_sample(power_w=1.7e308), "power_w", "between 0 and 2000; got 1.7e"),
    ("clock past any GPU", lambda: with_sample(sm_clock_mhz=4000), "sm_clock_mhz", "between 0 and 3500"),
    # Past the limits of n1's GPUs (H100-SXM5-80GB, 81920 MiB), though within those of some GPU.
    ("power past 1.5 x TDP", lambda: with_sample(power_w=1051), "power_w", "at most 1050, 1.5 × the 700 W TDP of H100-SXM5-80GB; got 1051"),
    ("power limit past 1.5 x TDP", lambda: with_sample(power_limit_w=1100.0), "power_limit_w", "at most 1050"),
    ("memory past the GPU's", lambda: with_sample(memory_used_mib=90000), "memory_used_mib", r"at most 81920, the GPU's memory \(81920 MiB\)"),
    ("total past the GPU's", lambda: with_sample(memory_total_mib=163840), "memory_total_mib", "at most 81920"),
    ("reserved past the GPU's", lambda: with_sample(memory_reserved_mib=90000), "memory_reserved_mib", "at most 81920"),
    ("clock past the model's", lambda: with_sample(sm_clock_mhz=2500), "sm_clock_mhz", "1980 MHz maximum clock"),
    ("used over total", lambda: with_sample(memory_used_mib=4096, memory_total_mib=2048), "memory_used_mib", r"must not exceed memory_total_mib \(2048\)"),
    ("used + reserved over total", lambda: with_sample(memory_used_mib=2048, memory_reserved_mib=1024, memory_total_mib=3000), "memory_used_mib", r"memory_total_mib minus memory_reserved_mib \(1976\)"),
    ("too cold", lambda: with_sample(temperature_c=-51), "temperature_c", "-50"),
    ("too hot", lambda: with_sample(temperature_c=150.5), "temperature_c", "150"),
    ("missing gpu_uuid", lambda: without("gpu_uuid"), "gpu_uuid", "required"),
    ("missing ts", lambda: without("ts"), "ts", "required"),
    ("null ts", lambda: with_sample(ts=None), "ts", "may not be null"),
    ("unknown GPU", lambda: with_sample(gpu_uuid="GPU-ghost"), "gpu_uuid", "Unknown GPU 'GPU-ghost'"),
    ("GPU of another node", lambda: with_sample(gpu_uuid="GPU-n2-0"), "gpu_uuid", "not a GPU of node 'n1'"),
    ("10 minutes ahead", lambda: with_sample(seconds_ago=-600), "ts", r"is 600 s in the future \(allowed skew 120 s\)"),
    ("naive timestamp", lambda: with_sample(ts="2026-03-02T12:00:00"), "ts", "must have a timezone"),
    ("not a timestamp", lambda: with_sample(ts="yesterday"), "ts", "wrong format"),
    ("year 1 east of UTC", lambda: with_sample(ts="0001-01-01T00:00:00+01:00"), "ts", "out of the supported range"),
    ("year 9999 west of UTC", lambda: with_sample(ts="9999-12-31T23:59:59-01:00"), "ts", "out of the supported range"),
    ("timestamp as a number", lambda: with_sample(ts=1767225600), "ts", "wrong format"),
    ("40 days old", lambda: with_sample(seconds_ago=40 * 86400), "ts", "older than the rollup retention"),
    ("a sample is a number", lambda: batch(sample(seconds_ago=30), 7), "non_field_errors", "Expected a dictionary"),
    ("misspelt metric", lambda: with_sample(utilisation_pct=50), "utilisation_pct", "Unknown field"),
    ("NUL in a GPU UUID", lambda: with_sample(gpu_uuid="GPU-n1-1\x00"), "gpu_uuid", "Null characters"),
    ("GPU UUID too long", lambda: with_sample(gpu_uuid="G" * 97), "gpu_uuid", "no more than 96"),
    ("processes not a list", lambda: with_sample(processes={"pid": 1}), "processes", "Expected a list"),
    ("process without a pid", lambda: with_sample(processes=[{"used_memory_mib": 5}]), "processes", "Process 0"),
    ("process memory as text", lambda: with_sample(processes=[{"pid": 1, "used_memory_mib": "5"}]), "processes", "used_memory_mib"),
]

BAD_BATCHES: list[tuple[str, Callable[[], Any], tuple[str, ...], str]] = [
    ("missing node", lambda: {"samples": [sample()]}, ("node",), "required"),
    ("missing samples", lambda: {"node": "n1"}, ("samples",), "required"),
    ("empty body", lambda: {}, ("node",), "required"),
    ("unknown node", lambda: batch(sample(), node="n9"), ("node",), "Unknown node 'n9'"),
    ("samples is text", lambda: {"node": "n1", "samples": "GPU-n1-0"}, ("samples",), "Expected a list"),
    ("samples is an object", lambda: {"node": "n1", "samples": {"0": sample()}}, ("samples",), "Expected a list"),
    ("body is a list", lambda: [sample()], ("non_field_errors",), "Expected a dictionary"),
    ("unknown top-level key", lambda: {**batch(), "source": "nvml"}, ("source",), "Unknown field"),
    ("NUL in the node", lambda: batch(sample(), node="n1\x00"), ("node",), "Null characters"),
    ("node name too long", lambda: batch(sample(), node="n" * 300), ("node",), "no more than 253"),
    ("node as a number", lambda: batch(sample(), node=7), ("node",), "Not a valid string"),
]


def message_at(errors: Any, path: tuple[str, ...]) -> str:
    for key in path:
        errors = errors[key]
    assert isinstance(errors, list), errors
    return " ".join(str(message) for message in errors)


@pytest.mark.parametrize("case, body, field, pattern", BAD_SAMPLES, ids=[case[0] for case in BAD_SAMPLES])
def test_it_stores_the_good_sample_and_answers_207_naming_the_bad_one(operator_api, n1, n2, case, body, field, pattern):
    response = post(operator_api, body())

    assert response.status_code == 207, response.content
    answer = response.json()
    assert (answer["stored"], answer["duplicates"], answer["refused"]) == (1, 0, 1)
    assert list(answer["samples"]) == ["1"] and re.search(pattern, message_at(answer, ("samples", "1", field))), answer
    # Sample 0 is valid: stored, and its GPU row shows it; sample 1's GPU row is untouched.
    assert list(GPUSample.objects.values_list("gpu__uuid", flat=True)) == ["GPU-n1-0"]
    assert list(GPU.objects.filter(sampled_at__isnull=False).values_list("uuid", flat=True)) == ["GPU-n1-0"]


@pytest.mark.parametrize("case, body, path, pattern", BAD_BATCHES, ids=[case[0] for case in BAD_BATCHES])
def test_it_answers_400_to_a_bad_batch_and_stores_nothing(operator_api, n1, n2, case, body, path, pattern):
    response = post(operator_api, body())

    assert response.status_code == 400, response.content
    assert re.search(pattern, message_at(response.json(), path)), response.json()
    assert GPUSample.objects.count() == 0
    assert not GPU.objects.filter(sampled_at__isnull=False).exists()


def test_it_answers_400_when_every_sample_is_refused(operator_api, n1):
    response = post(operator_api, batch(sample(utilization_pct=101), sample("GPU-n1-1", power_w=-1)))

    assert response.status_code == 400
    answer = response.json()
    assert (answer["stored"], answer["refused"], sorted(answer["samples"])) == (0, 2, ["0", "1"])
    assert GPUSample.objects.count() == 0


def test_one_out_of_range_sample_in_a_batch_of_96_leaves_the_other_95_stored(api):
    """Regression: one out-of-range sample refused its whole batch (96 sent, 0 stored)."""
    node = make_node("big", gpu_count=8)
    _, key = issue_agent_token(node)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    samples = [
        sample(f"GPU-big-{gpu}", seconds_ago=30 * tick, power_w=9999.0 if (tick, gpu) == (5, 3) else 250.0)
        for tick in range(12)
        for gpu in range(8)
    ]
    response = post(api, batch(*samples, node="big"))

    assert response.status_code == 207
    answer = response.json()
    bad = str(5 * 8 + 3)
    assert (answer["stored"], answer["refused"], list(answer["samples"]), answer["retry"]) == (95, 1, [bad], [])
    assert "power_w" in answer["samples"][bad]
    assert GPUSample.objects.count() == 95


def test_it_lists_samples_of_gpus_not_in_the_inventory_yet_as_worth_retrying(api, n1):
    _, key = issue_agent_token(n1)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    response = post(api, batch(sample("GPU-f6068136-new"), sample("GPU-n1-1", utilization_pct=120), sample("GPU-n1-0")))

    assert response.status_code == 207
    answer = response.json()
    assert answer["retry"] == [0]  # unknown GPU: maybe later; the out-of-range sample 1: never
    assert sorted(answer["samples"]) == ["0", "1"]
    assert answer["samples"]["0"] == {"gpu_uuid": ["Unknown GPU 'GPU-f6068136-new'."]}


def test_it_stores_reserved_memory_power_limit_and_processes(operator_api, n1):
    body = batch(sample(memory_used_mib=9421, memory_reserved_mib=480, power_limit_w=700.0,
                        processes=[{"pid": 4242, "used_memory_mib": 9400}, {"pid": 7, "used_memory_mib": None}]))
    assert post(operator_api, body).status_code == 201

    stored = GPUSample.objects.get()
    assert (stored.memory_used_mib, stored.memory_reserved_mib, stored.power_limit_w) == (9421, 480, 700.0)
    gpu = GPU.objects.get(uuid="GPU-n1-0")
    assert (gpu.memory_used_mib, gpu.memory_reserved_mib, gpu.power_limit_w) == (9421, 480, 700.0)
    assert gpu.processes == [[4242, 9400], [7, None]]
