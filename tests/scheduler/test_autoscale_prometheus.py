"""The autoscaler's Prometheus source: one instant query per series of the runtime's query set,
the deployment's selector in each; an empty answer or an unreachable Prometheus is a missing
series, so the policy makes no decision."""
from __future__ import annotations

import pytest

from scheduler import services
from scheduler.services import autoscaling, monitoring
from scheduler.services.autoscaling import autoscale_all
from tests.nodes.test_collector_prometheus import prometheus, vector  # noqa: F401 (the fixture)
from tests.scheduler.inventory import FakeClock, demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment():
    clock = FakeClock()
    cluster = demo_cluster(clock)
    deployment = services.deploy(services.DeploySpec(name="chat", model="llama-3-8b", memory_gb=16.0,
                                                     sharing="exclusive"), cluster=cluster)
    clock.advance(5)
    services.watch_deployment(deployment.pk, cluster=cluster)
    autoscaling.configure_autoscaling(deployment, user="test", policy="gpuplane")
    return deployment


def test_every_vllm_series_is_one_query_with_the_deployment_selector(prometheus, deployment, settings):  # noqa: F811
    settings.GPUPLANE_PROMETHEUS_URL = prometheus.url
    settings.AUTOSCALE_RUNTIME = "vllm"
    prometheus.answer_json(vector({"metric": {"pod": "a"}, "value": [0, "3"]}, {"metric": {"pod": "b"}, "value": [0, "4"]}))
    series = monitoring.prometheus_series(deployment)
    assert set(series) == set(settings.AUTOSCALE_QUERIES["vllm"])
    assert series["queue"] == 7.0  # summed over the vector
    assert len(prometheus.queries) == len(settings.AUTOSCALE_QUERIES["vllm"])
    assert any(q.startswith("sum(vllm:num_requests_waiting{") for q in prometheus.queries)
    assert all(f'gpuplane_io_deployment="{deployment.pk}"' in q and 'namespace="default"' in q
               for q in prometheus.queries)


def test_an_empty_answer_is_a_missing_series_and_no_decision(prometheus, deployment, settings):  # noqa: F811
    settings.GPUPLANE_PROMETHEUS_URL = prometheus.url
    settings.AUTOSCALE_METRICS_SOURCE = "prometheus"
    prometheus.answer_json(vector())
    assert autoscale_all() == {"no-decision": 1}
    event = deployment.scaling_events.get()
    assert "missing series: queue" in event.message


def test_an_unreachable_prometheus_is_no_decision(deployment, settings):
    settings.GPUPLANE_PROMETHEUS_URL = "http://127.0.0.1:9"
    settings.AUTOSCALE_METRICS_SOURCE = "prometheus"
    assert autoscale_all() == {"no-decision": 1}


def test_the_sglang_queries_are_a_setting(prometheus, deployment, settings):  # noqa: F811
    settings.GPUPLANE_PROMETHEUS_URL = prometheus.url
    settings.AUTOSCALE_RUNTIME = "sglang"
    prometheus.answer_json(vector({"metric": {}, "value": [0, "1"]}))
    monitoring.prometheus_series(deployment)
    assert any("sglang:num_queue_reqs" in q for q in prometheus.queries)
