"""Scale-out as deploy/ runs it: two web processes (gunicorn, as in the image) and two Celery workers
on one PostgreSQL and one Redis. 200 concurrent deploys, spread over both web processes, race for
100 free GPUs while one web process is SIGKILLed (master and workers, as an OOM kill or a lost node
would) in the middle of the load.

Every invariant of the capacity accounting holds afterwards (no GPU over-allocated, every active
placement holds exactly its partitions, no partition held twice), no more deployments were placed
than GPUs were free, and every deployment that was answered 201 is in the database with its
placement: a client that was told "created" never loses it. Requests cut off by the kill may or
may not have committed; either way nothing is half-written.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from nodes.models import Partition
from scheduler.models import Deployment, Placement
from tests.deploy.rendering import BASE_DIR
from tests.deploy.test_check_deploy import web_environment
from tests.redis_scratch import delete_prefixed_keys, scratch_prefix
from tests.rollouts.crash import database_url
from tests.scheduler.inventory import check_invariants, free_whole_gpus, whole_gpu_cluster

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL: several processes share it"),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: the workers need a broker"),
]

FREE_GPUS = 100  # fewer than the deploys that get through: they race for the last GPUs
REQUESTS = 200
CLIENTS = 24
KILL_AFTER = 70  # answers received before the second web process is killed
START_TIMEOUT_S = 60
ENTRYPOINT = str(BASE_DIR / "deploy" / "image" / "entrypoint")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


class Cluster:
    """The processes of one installation, started from the image's entry point in this checkout."""

    def __init__(self, folder: Path, prefix: str) -> None:
        self.folder = folder
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME")}
        # The production overlay's settings, on this machine's database, Redis and simulated cluster.
        self.env |= web_environment("production") | {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "DJANGO_SETTINGS_MODULE": "gpuplane.settings",
            "DATABASE_URL": database_url(), "REDIS_URL": os.environ["REDIS_URL"], "GPUPLANE_REDIS_KEY_PREFIX": prefix,
            "GPUPLANE_VAR_DIR": str(folder / "var"), "GPUPLANE_STATIC_ROOT": str(folder / "static"),
            "GPUPLANE_CLUSTER": "simulated", "GPUPLANE_SIMULATED_STATE": str(folder / "cluster.sqlite3"),
            "GPUPLANE_POD_IP": "127.0.0.1", "WEB_CONCURRENCY": "2", "CELERY_CONCURRENCY": "1",
        }

    def start(self, name: str, *args: str, **env: str) -> None:
        with (self.folder / f"{name}.log").open("wb") as log:
            self.processes[name] = subprocess.Popen([ENTRYPOINT, *args], cwd=BASE_DIR, env=self.env | env,
                                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, name: str) -> None:
        """SIGKILL the process and everything it started (gunicorn's workers): no cleanup runs."""
        os.killpg(self.processes[name].pid, signal.SIGKILL)
        self.processes[name].wait()

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def installation():
    prefix = scratch_prefix()
    folder = Path(tempfile.mkdtemp(prefix="gpuplane-scale-out-"))
    cluster = Cluster(folder, prefix)
    try:
        yield cluster
    finally:
        cluster.stop()
        delete_prefixed_keys(os.environ["REDIS_URL"], prefix)


def deploy(port: int, key: str, number: int) -> tuple[int, str, dict[str, Any] | None]:
    """POST one deployment to the web process on `port`: (port, outcome, body); outcome is the
    status code, or "cut" when the connection failed or broke before an answer came."""
    body = {"name": f"scale-{number}", "model": "m", "memory_gb": 40, "gpu_count": 1, "sharing": "exclusive",
            "allow_default_scheduler": False, "namespace": "default"}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/api/v1/deployments/", json.dumps(body), {
            "Content-Type": "application/json", "Authorization": f"Token {key}",
            "X-Forwarded-Proto": "https"})  # as the ingress that ends TLS says
        response = conn.getresponse()
        return port, str(response.status), json.loads(response.read() or b"null")
    except (OSError, http.client.HTTPException):
        return port, "cut", None


def test_two_web_processes_and_two_workers_keep_every_invariant_when_one_web_is_killed(installation, operator):
    from knox.models import AuthToken

    whole_gpu_cluster(FREE_GPUS, busy_per_node=1)
    assert free_whole_gpus() == FREE_GPUS
    _token, key = AuthToken.objects.create(user=operator)
    ports = {"web-a": _free_port(), "web-b": _free_port()}
    for name, port in ports.items():
        installation.start(name, "web", GPUPLANE_BIND=f"127.0.0.1:{port}")
    for name in ("worker-a", "worker-b"):
        installation.start(name, "worker", "--hostname", f"{name}@%h")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not all(_healthy(port) for port in ports.values()):
        assert time.monotonic() < deadline, installation.log("web-a")[-2000:] + installation.log("web-b")[-2000:]
        time.sleep(0.3)

    answered = 0
    lock = threading.Lock()
    killed = threading.Event()

    def one(number: int) -> tuple[int, str, dict[str, Any] | None]:
        nonlocal answered
        result = deploy(list(ports.values())[number % 2], key, number)
        with lock:
            answered += 1
            if answered == KILL_AFTER and not killed.is_set():
                killed.set()
                installation.kill("web-b")
        return result

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        results = list(pool.map(one, range(REQUESTS)))

    assert killed.is_set()
    outcomes = Counter((port, outcome) for port, outcome, _ in results)
    assert {outcome for _, outcome in outcomes} <= {"201", "409", "cut"}, outcomes
    assert sum(n for (_, outcome), n in outcomes.items() if outcome == "409") > 0, outcomes  # capacity ran out
    assert outcomes[(ports["web-a"], "201")] > 0 and outcomes[(ports["web-b"], "201")] > 0, outcomes
    assert outcomes[(ports["web-b"], "cut")] > 0, outcomes  # the kill really cut requests off
    assert outcomes[(ports["web-a"], "cut")] == 0, outcomes  # ...and only those of the killed process

    # Every deployment answered 201 is there, placed, holding its GPU.
    created = {body["id"] for _, outcome, body in results if outcome == "201" and body}
    assert len(created) == sum(n for (_, outcome), n in outcomes.items() if outcome == "201")
    stored = dict(Deployment.objects.filter(pk__in=created).values_list("pk", "status"))
    assert set(stored) == created, f"answered 201 but missing: {sorted(created - set(stored))}"
    placed = set(Placement.objects.filter(deployment__in=created).values_list("deployment_id", flat=True))
    assert placed == created
    # Deployments nobody was told about can only be requests the kill cut off after they committed.
    unanswered = Deployment.objects.exclude(pk__in=created).count()
    assert unanswered <= outcomes[(ports["web-b"], "cut")]
    # Never more placements than free GPUs, and the accounting is sound across the processes.
    active = Placement.objects.filter(status__in=("reserved", "binding", "running"))
    assert active.count() <= FREE_GPUS
    assert Partition.objects.filter(hold__isnull=False).count() == active.count()
    check_invariants()
    # The workers took the deploys' watch tasks off the broker the web processes put them on.
    print(f"outcomes by web process: {dict(outcomes)}; committed but unanswered: {unanswered}")
    assert "Task scheduler.tasks.watch_deployment_task" in installation.log("worker-a") + installation.log("worker-b")
