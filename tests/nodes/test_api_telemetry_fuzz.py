"""`POST /api/v1/telemetry/` fuzzed: whatever the body, a 201, 207 or 400 (never a 500), and exactly the
samples the answer says were stored.

The bodies are sent as JSON text, so that they can hold what a JSON encoder refuses to write
but a client can still send: NaN, Infinity, 1e999, integers of hundreds of digits, nesting far
deeper than Python's recursion limit. `test_the_fuzz_bodies_reach_what_they_claim` checks that
the strategies do produce those.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from nodes.models import GPU, GPUSample, Node
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

URL = "/api/v1/telemetry/"


def iso(seconds_ago: float = 0) -> str:
    return (timezone.now() - timedelta(seconds=seconds_ago)).isoformat()


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


@dataclass(frozen=True)
class Nested:
    """A JSON value `depth` levels deep, kept as text: json.dumps cannot write it (it recurses too)."""

    depth: int
    opener: str  # "[" or '{"a":'

    def text(self) -> str:
        closer = "]" if self.opener == "[" else "}"
        return self.opener * self.depth + "1" + closer * self.depth


def to_json(value: Any) -> str:
    """JSON text of a generated body: NaN and +/-Infinity as the tokens Python writes, Nested as its text."""
    if isinstance(value, Nested):
        return value.text()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(key))}: {to_json(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_json(item) for item in value) + "]"
    return json.dumps(value)  # allow_nan: NaN, Infinity, -Infinity


NUMBERS = (
    st.floats()  # NaN and +/-inf included
    | st.sampled_from([1.7e308, -1.7e308, 5e-324, float("nan"), float("inf"), float("-inf"), 2**63, -(2**63)])
    | st.integers(min_value=19, max_value=400).map(lambda digits: 10**digits)  # past int64, up to 10**400
    | st.integers(min_value=19, max_value=400).map(lambda digits: -(10**digits))
    | st.integers(min_value=-10, max_value=100_000)  # plausible values, so that some batches are stored
)
DEEP = st.builds(
    Nested, st.sampled_from([2, 500, 999, 1000, 5000, 100_000]) | st.integers(1, 3000), st.sampled_from(["[", '{"a":'])
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.text(max_size=30) | DEEP,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
# What a metric may be sent as: a number (any), or a wrong type, shallow or deep.
METRIC_VALUES = NUMBERS | st.text(max_size=10) | st.booleans() | st.none() | JSON_VALUES
METRICS = [
    "utilization_pct", "memory_used_mib", "memory_total_mib", "memory_reserved_mib", "power_w", "power_limit_w",
    "temperature_c", "sm_clock_mhz",
]
GPU_UUIDS = st.sampled_from(["GPU-n1-0", "GPU-n1-1", "GPU-n2-0", "GPU-?"])
TIMESTAMPS = (
    st.integers(min_value=0, max_value=3600).map(lambda seconds: iso(seconds))  # recent: may be stored
    | st.datetimes(timezones=st.none() | st.timezones()).map(lambda d: d.isoformat())
)
FUZZ_SAMPLES = st.fixed_dictionaries(
    {"gpu_uuid": GPU_UUIDS, "ts": TIMESTAMPS}, optional=dict.fromkeys(METRICS, METRIC_VALUES)
) | st.fixed_dictionaries(
    {},
    optional={
        "gpu_uuid": GPU_UUIDS | JSON_VALUES,
        "ts": TIMESTAMPS | JSON_VALUES,
        **dict.fromkeys(METRICS, METRIC_VALUES),
        "unknown": JSON_VALUES,
    },
)
NODES = st.sampled_from(["n1", "n2", "n9"])
FUZZ_BODIES = (
    st.fixed_dictionaries({"node": NODES, "samples": st.lists(FUZZ_SAMPLES, min_size=1, max_size=4)})
    | st.fixed_dictionaries({}, optional={"node": NODES | JSON_VALUES, "samples": st.lists(FUZZ_SAMPLES) | JSON_VALUES})
    | JSON_VALUES
)


def latest_values() -> list[tuple[Any, ...]]:
    return list(GPU.objects.order_by("pk").values_list("pk", "sampled_at", "utilization_pct", "power_w", "memory_used_mib"))


def metrics_sent(body: Any) -> list[Any]:
    """Every metric value of every sample in a generated body that has a list of samples."""
    samples = body.get("samples") if isinstance(body, dict) else None
    if not isinstance(samples, list):
        return []
    return [sample[key] for sample in samples if isinstance(sample, dict) for key in METRICS if key in sample]


REACHABLE: dict[str, Callable[[Any, str], bool]] = {
    # what: condition on a generated body and its JSON text
    "NaN": lambda body, text: "NaN" in text,
    "Infinity": lambda body, text: re.search(r"(?<!-)Infinity", text) is not None,
    "-Infinity": lambda body, text: "-Infinity" in text,
    "1.7e308": lambda body, text: "1.7e+308" in text,
    "a 100-digit integer": lambda body, text: re.search(r"\d{100}", text) is not None,
    "lists 5000 deep": lambda body, text: "[" * 5000 in text,
    "objects 1000 deep": lambda body, text: '{"a":' * 1000 in text,
    "a metric of NaN": lambda body, text: any(isinstance(v, float) and math.isnan(v) for v in metrics_sent(body)),
    "a metric of 1.7e308": lambda body, text: 1.7e308 in metrics_sent(body),
    "a metric past int64": lambda body, text: any(isinstance(v, int) and v > 2**63 for v in metrics_sent(body)),
    "a metric as text": lambda body, text: any(isinstance(v, str) for v in metrics_sent(body)),
    "a metric as a boolean": lambda body, text: any(isinstance(v, bool) for v in metrics_sent(body)),
    "a metric as an array or object": lambda body, text: any(isinstance(v, list | dict | Nested) for v in metrics_sent(body)),
}


# Sent by the fuzz test on every run, whatever the generated bodies happen to reach (generation
# is not the same from run to run, even derandomized, on a loaded machine).
ALWAYS_SENT = [Nested(5000, "["), Nested(100_000, "["), Nested(1000, '{"a":')]


def test_the_fuzz_bodies_reach_what_they_claim():
    """In as many bodies as the fuzz test sends: NaN, infinities, 1.7e308, huge integers, wrong types, deep nesting."""
    reached: set[str] = {what for body in ALWAYS_SENT for what, condition in REACHABLE.items()
                         if condition(body, to_json(body))}

    @settings(max_examples=200, database=None, derandomize=True, deadline=None)
    @given(body=FUZZ_BODIES)
    def collect(body: Any) -> None:
        text = to_json(body)
        reached.update(what for what, condition in REACHABLE.items() if condition(body, text))

    collect()

    assert set(REACHABLE) - reached == set()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=FUZZ_BODIES)
@example(body=ALWAYS_SENT[0])
@example(body=ALWAYS_SENT[1])
@example(body=ALWAYS_SENT[2])
def test_it_never_answers_500_whatever_the_body(operator_api, n1, n2, body):
    samples_before, gpus_before = GPUSample.objects.count(), latest_values()

    response = operator_api.generic("POST", URL, to_json(body), content_type="application/json")

    assert response.status_code in (201, 207, 400), (response.status_code, to_json(body)[:300], response.content[:300])
    event(f"status {response.status_code}")
    answer = response.json()
    assert isinstance(answer, dict)
    if response.status_code == 400:
        # Nothing stored, no GPU row's latest values touched.
        assert GPUSample.objects.count() == samples_before
        assert latest_values() == gpus_before
        return
    assert GPUSample.objects.count() == samples_before + answer["stored"]
    sent = len(body["samples"])
    if response.status_code == 201:
        assert answer["stored"] + answer["duplicates"] == sent
    else:  # 207: the refused ones are named by index, the others taken
        assert answer["refused"] == len(answer["samples"]) and answer["stored"] + answer["duplicates"] > 0
        assert answer["stored"] + answer["duplicates"] + answer["refused"] == sent
        assert all(0 <= int(index) < sent for index in answer["samples"])
