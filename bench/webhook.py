"""The admission webhook timed on its real HTTP path: `POST /webhooks/mutate-pods` against gunicorn.

    python bench/webhook.py                     # table: 50 concurrent clients, 500 nodes of 8 GPUs
    python bench/webhook.py --json              # one JSON object

On a database of its own (default postgres://postgres@127.0.0.1:5432/gpuplane_bench_webhook; a
sqlite:/// URL works too) with a simulated fleet, gunicorn started as `make run` starts it (as
bench/deploy_api.py does), then --clients threads, each on a keep-alive connection, post:
1. --requests AdmissionReviews of pods the webhook places: one nvidia.com/gpu, training (whole
   GPU): policy flow, snapshot, placement engine, quota, reservation, decision matrix, JSON Patch;
2. --requests AdmissionReviews of pods it leaves alone (`gpuplane.io/optimize: "false"`).
Targets (issue 21): p99 < 50 ms placing, p99 < 5 ms leaving alone, at 50 concurrent requests.
Latencies are client-side wall times of whole HTTP requests. Afterwards the database is checked
for over-allocation, and every placing answer must carry a patch.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.deploy_api import (  # noqa: E402 - after the path is set
    over_allocations,
    percentile,
    recreate_database,
    start_web,
    stop_web,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/gpuplane_bench_webhook"


def review(name: str, *, place: bool) -> bytes:
    labels = {"gpuplane.io/workload-type": "training"} if place else {"gpuplane.io/optimize": "false"}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": f"{name}-", "namespace": "bench", "labels": labels},
           "spec": {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.9",
                                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"}}}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": "bench",
                                   "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod}}).encode()


class Client:
    """One keep-alive connection; records (latency_s, ok) per review."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.results: list[tuple[float, bool]] = []

    def post(self, body: bytes, *, expect_patch: bool) -> None:
        started = time.perf_counter()
        try:
            self.connection.request("POST", "/webhooks/mutate-pods", body=body,
                                    headers={"Content-Type": "application/json"})
            response = self.connection.getresponse()
            answer = json.loads(response.read())["response"]
            ok = response.status == 200 and answer["allowed"] and (
                bool(answer.get("patch") and json.loads(base64.b64decode(answer["patch"]))) == expect_patch)
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            ok = False
        self.results.append((time.perf_counter() - started, ok))


def run(port: int, clients: int, requests: int, *, place: bool) -> tuple[list[tuple[float, bool]], float]:
    """``requests`` reviews per client from ``clients`` threads that start together."""
    pool = [Client(port) for _ in range(clients)]
    barrier = threading.Barrier(clients)

    def work(number: int, client: Client) -> None:
        barrier.wait()
        for request in range(requests):
            client.post(review(f"c{number}-r{request}", place=place), expect_patch=place)

    threads = [threading.Thread(target=work, args=(n, c)) for n, c in enumerate(pool)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [r for c in pool for r in c.results], time.perf_counter() - started


def summarize(results: list[tuple[float, bool]], wall_s: float) -> dict[str, float | int]:
    latencies = [latency * 1000 for latency, _ in results]
    return {"requests": len(results), "failed": sum(1 for _, ok in results if not ok),
            "p50_ms": round(percentile(latencies, 50), 2), "p99_ms": round(percentile(latencies, 99), 2),
            "reviews_per_s": round(len(results) / wall_s, 1) if wall_s else 0.0}


def prepare(nodes: int, gpus_per_node: int, models: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from nodes.fleet_loader import load_fleet

    call_command("migrate", verbosity=0)
    load_fleet(nodes, gpus_per_node=gpus_per_node, models=models, replace=True)
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--models", default="H100-SXM5-80GB=3,A100-SXM4-80GB=2,A100-SXM4-40GB=2,L40S=1")
    parser.add_argument("--clients", type=int, default=50, help="concurrent requests (default 50)")
    parser.add_argument("--requests", type=int, default=10, help="reviews per client and kind (default 10)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    var_dir = Path(tempfile.mkdtemp(prefix="gpuplane-bench-webhook-"))
    metrics_dir = var_dir / "prometheus-multiproc"
    metrics_dir.mkdir()
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "gpuplane.settings", "DATABASE_URL": args.database_url,
        "GPUPLANE_VAR_DIR": str(var_dir), "GPUPLANE_CLUSTER": "simulated",
        "GPUPLANE_SIMULATED_STATE": str(var_dir / "simulated-cluster.json"), "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    })
    os.environ.pop("REDIS_URL", None)
    recreate_database(args.database_url)
    prepare(args.nodes, args.gpus_per_node, args.models)
    web = start_web(args.port)
    try:
        warm = Client(args.port)  # the first reviews build each worker's snapshot
        for number in range(8):
            warm.post(review(f"warm-{number}", place=True), expect_patch=True)
        time.sleep(3.0)
        placing, placing_s = run(args.port, args.clients, args.requests, place=True)
        alone, alone_s = run(args.port, args.clients, args.requests, place=False)
    finally:
        stop_web(web)
    from django.db import connection

    connection.close()
    result = {"nodes": args.nodes, "gpus": args.nodes * args.gpus_per_node,
              "database": urlsplit(args.database_url).scheme, "clients": args.clients,
              "placing": summarize(placing, placing_s), "left_alone": summarize(alone, alone_s),
              "over_allocations": over_allocations(), "python": platform.python_version(), "cpus": os.cpu_count()}
    shutil.rmtree(var_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return
    for kind in ("placing", "left_alone"):
        figures = result[kind]
        print(f"{kind}: {args.clients} concurrent, p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, "
              f"{figures['reviews_per_s']} reviews/s, {figures['failed']} failed of {figures['requests']}")
    print(f"over-allocations: {result['over_allocations']}")


if __name__ == "__main__":
    main()
