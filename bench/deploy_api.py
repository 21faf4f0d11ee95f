"""The real deploy path, timed as a user sees it: HTTP `POST /api/v1/deployments/` against gunicorn.

    python bench/deploy_api.py --nodes 500                 # table
    python bench/deploy_api.py --nodes 5000 --json         # one JSON object (see "Contract" in issue 11)

What it does, on a database of its own (never the test suite's `test` / `test_test`):
1. drops and creates the database named by --database-url (default
   postgres://postgres@127.0.0.1:5432/gpuplane_bench; a sqlite:/// URL works too), migrates it,
   and loads a simulated fleet of --nodes nodes (`manage.py load_fleet`'s code) into it and into a
   simulated cluster under a temporary GPUPLANE_VAR_DIR;
2. creates an operator and an API token (knox), as a user would get one;
3. starts gunicorn exactly as `make run` does (`run_gpuplane.process_specs`' web process: 2
   workers x 4 threads, one shared prometheus multiprocess directory); Celery worker and beat are
   not started (the watch task is only enqueued, and no inventory sync runs meanwhile);
4. POSTs --requests deploys one after another, then --concurrent-requests deploys from --clients
   threads, each a one-GPU exclusive inference deployment under a fresh name: HTTP -> validation
   -> snapshot -> decision -> reservation -> simulated cluster;
5. checks the database afterwards: a GPU whose counters or held partitions exceed its capacity, or
   a partition held twice, is an over-allocation;
6. reports the CPU that gunicorn and the PostgreSQL backends spent per deploy (from /proc), which
   does not depend on what else runs on the machine: latencies on a loaded machine are a multiple
   of it, on a quiet one close to it plus the waits (round trips, commits).

Latencies are client-side wall times of whole HTTP requests; deploys/s counts 201 answers only.
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/gpuplane_bench"
# After the first deploy, the web workers' warmers build their snapshots; then the server's idle
# CPU is measured over a window of its own (see `server_cpu_s`).
IDLE_SETTLE_S = 3.0
IDLE_WINDOW_S = 3.0
# The test suite's databases: a benchmark that dropped one would break every running test.
FORBIDDEN_DATABASES = {"test", "test_test", "postgres", "template0", "template1"}


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]


def recreate_database(url: str) -> None:
    """Drop and create the benchmark's database (PostgreSQL), or remove the SQLite file."""
    parts = urlsplit(url)
    if parts.scheme.startswith("sqlite"):
        Path(parts.path).unlink(missing_ok=True)
        Path(parts.path).parent.mkdir(parents=True, exist_ok=True)
        return
    name = parts.path.lstrip("/")
    if not name or name in FORBIDDEN_DATABASES:
        raise SystemExit(f"refusing to drop database {name!r}: name a database of the benchmark's own")
    import psycopg

    admin_url = parts._replace(scheme="postgresql", path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def prepare(args: argparse.Namespace) -> str:
    """Database, fleet and an operator's API token; returns the token's key."""
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from knox.models import AuthToken

    from gpuplane.roles import OPERATOR
    from nodes.fleet_loader import load_fleet

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    load_fleet(args.nodes, gpus_per_node=args.gpus_per_node, models=args.models, replace=True)
    args.load_s = time.perf_counter() - started
    from django.db import connection

    if connection.vendor == "postgresql":
        # Statistics, as a live database has them (autovacuum would take them a minute later,
        # in the middle of the run).
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    user = User.objects.create_user("bench-operator", password=None)
    user.groups.add(Group.objects.get_or_create(name=OPERATOR)[0])
    _, key = AuthToken.objects.create(user)
    return str(key)


def start_web(port: int) -> subprocess.Popen[bytes]:
    """gunicorn as `make run` starts it; returns once it answers."""
    from gpuplane.management.commands.run_gpuplane import process_specs

    web = process_specs("127.0.0.1", port, embedded_broker=True, beat_schedule="unused")[0]
    log = open(Path(os.environ["GPUPLANE_VAR_DIR"]) / "web.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(web.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gunicorn exited ({process.returncode}); see {log.name}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            connection.getresponse().read()
            return process
        except OSError:
            time.sleep(0.2)
    raise SystemExit("gunicorn did not answer within 60 s")


def stop_web(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class Client:
    """One keep-alive HTTP connection posting deploys; records (latency_s, status) per request."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.results: list[tuple[float, int]] = []

    def deploy(self, name: str) -> None:
        body = json.dumps({"name": name, "model": "llama-3-8b", "memory_gb": 8, "sharing": "exclusive"})
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        started = time.perf_counter()
        try:
            self.connection.request("POST", "/api/v1/deployments/", body=body, headers=headers)
            response = self.connection.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            status = 0
        self.results.append((time.perf_counter() - started, status))


def run_sequential(port: int, token: str, count: int) -> tuple[list[tuple[float, int]], float]:
    client = Client(port, token)
    client.deploy("warm-up")  # first request imports the views; not what users wait for later
    client.results.clear()
    started = time.perf_counter()
    for number in range(count):
        client.deploy(f"seq-{number}")
    return client.results, time.perf_counter() - started


def run_concurrent(port: int, token: str, count: int, clients: int) -> tuple[list[tuple[float, int]], float]:
    workers = [Client(port, token) for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def work(index: int, client: Client) -> None:
        # Each client's first request may be a worker's first (views imported, snapshot built
        # at boot): steady state is what users wait for, as in the sequential warm-up.
        client.deploy(f"con-warm-up-{index}")
        client.results.clear()
        barrier.wait()
        for number in range(index, count, clients):
            client.deploy(f"con-{number}")

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return [result for client in workers for result in client.results], time.perf_counter() - started


def server_cpu_s(web: subprocess.Popen[bytes]) -> tuple[float, float]:
    """CPU seconds used so far by gunicorn (its process group) and by the database's backends of
    this run (PostgreSQL on this machine; 0 elsewhere): what deploys cost whatever the wait."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    backends: set[int] = set()
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()")
            backends = {row[0] for row in cursor.fetchall()}
    web_ticks = database_ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[2] is the process group; [11], [12] user and system ticks (stat(5), after the name).
        if int(fields[2]) == web.pid:
            web_ticks += int(fields[11]) + int(fields[12])
        elif pid in backends:
            database_ticks += int(fields[11]) + int(fields[12])
    return web_ticks / tick, database_ticks / tick


def over_allocations() -> int:
    """GPUs whose counters or held partitions exceed the GPU, plus partitions with two holders."""
    from collections import Counter, defaultdict

    from nodes.models import GPU, Partition
    from nodes.vocabulary import SHARE_MILLI_FULL

    held: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    holders: Counter[int] = Counter()
    for pk, gpu_id, share, memory, placement_id, pod in Partition.objects.values_list(
            "pk", "gpu_id", "share_milli", "memory_mib", "hold__placement_id", "pod"):
        if placement_id or pod:
            held[gpu_id][0] += share
            held[gpu_id][1] += memory
            holders[pk] += bool(placement_id) + bool(pod)
    bad = sum(1 for count in holders.values() if count > 1)
    for pk, milli, memory, capacity in GPU.objects.values_list("pk", "allocated_milli", "allocated_memory_mib",
                                                                "memory_mib"):
        held_milli, held_memory = held.get(pk, [0, 0])
        if milli > SHARE_MILLI_FULL or memory > capacity or held_milli > SHARE_MILLI_FULL or held_memory > capacity:
            bad += 1
    return bad


def summarize(results: list[tuple[float, int]], wall_s: float) -> dict[str, float | int]:
    latencies = [latency * 1000 for latency, status in results if status == 201]
    return {
        "requests": len(results),
        "placed": len(latencies),
        "failed": sum(1 for _, status in results if status != 201),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "deploys_per_s": round(len(latencies) / wall_s, 2) if wall_s else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--models", default="H100-SXM5-80GB=3,A100-SXM4-80GB=2,A100-SXM4-40GB=2,L40S=1")
    parser.add_argument("--requests", type=int, default=40, help="sequential deploys (default 40)")
    parser.add_argument("--concurrent-requests", type=int, default=80, help="deploys over all clients (default 80)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", action="store_true", help="keep the temporary var directory (logs, state)")
    args = parser.parse_args()

    var_dir = Path(tempfile.mkdtemp(prefix="gpuplane-bench-"))
    metrics_dir = var_dir / "prometheus-multiproc"
    metrics_dir.mkdir()
    # Settings are read from the environment, by this process and by gunicorn's.
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "gpuplane.settings",
        "DATABASE_URL": args.database_url,
        "GPUPLANE_VAR_DIR": str(var_dir),
        "GPUPLANE_CLUSTER": "simulated",
        "GPUPLANE_SIMULATED_STATE": str(var_dir / "simulated-cluster.json"),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    })
    os.environ.pop("REDIS_URL", None)
    recreate_database(args.database_url)
    token = prepare(args)
    web = start_web(args.port)
    try:
        # What the server burns while idle (the snapshot warmers' first builds, then their
        # periodic catch-up) is measured apart and taken off the per-deploy CPU.
        Client(args.port, token).deploy("boot-warm-up")
        time.sleep(IDLE_SETTLE_S)
        idle_started, idle_cpu = time.perf_counter(), sum(server_cpu_s(web))
        time.sleep(IDLE_WINDOW_S)
        cpu_before = server_cpu_s(web)
        idle_rate = (sum(cpu_before) - idle_cpu) / (time.perf_counter() - idle_started)
        sequential, sequential_s = run_sequential(args.port, token, args.requests)
        cpu_between = server_cpu_s(web)
        concurrent, concurrent_s = run_concurrent(args.port, token, args.concurrent_requests, args.clients)
        cpu_after = server_cpu_s(web)
        sequential_cpu = sum(cpu_between) - sum(cpu_before) - idle_rate * sequential_s
        concurrent_cpu = sum(cpu_after) - sum(cpu_between) - idle_rate * concurrent_s
        concurrent_database_cpu = cpu_after[1] - cpu_between[1]
    finally:
        stop_web(web)
    from django.db import connection

    connection.close()  # gunicorn's writes are committed; read them on a fresh connection
    seq, con = summarize(sequential, sequential_s), summarize(concurrent, concurrent_s)
    result = {
        "nodes": args.nodes,
        "gpus": args.nodes * args.gpus_per_node,
        "database": urlsplit(args.database_url).scheme,
        "load_fleet_s": round(args.load_s, 1),
        **{key: seq[key] for key in ("p50_ms", "p99_ms", "deploys_per_s")},
        "sequential_failed": seq["failed"],
        "concurrent_clients": args.clients,
        "concurrent_deploys_per_s": con["deploys_per_s"],
        "concurrent_p50_ms": con["p50_ms"],
        "concurrent_p99_ms": con["p99_ms"],
        "concurrent_failed": con["failed"],
        "concurrent_statuses": sorted({status for _, status in concurrent if status != 201}),
        # Server CPU (gunicorn and PostgreSQL backends) per deploy: the machine's speed, not its load.
        "sequential_cpu_ms_per_deploy": round(1000 * sequential_cpu / max(len(sequential), 1), 1),
        "concurrent_cpu_ms_per_deploy": round(1000 * concurrent_cpu / max(len(concurrent), 1), 1),
        "concurrent_database_cpu_ms_per_deploy": round(1000 * concurrent_database_cpu / max(len(concurrent), 1), 1),
        "idle_server_cpu_pct": round(100 * idle_rate, 1),
        "over_allocations": over_allocations(),
        "state_file_mb": round((var_dir / "simulated-cluster.json").stat().st_size / 1e6, 1),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if args.keep:
        result["var_dir"] = str(var_dir)
    else:
        shutil.rmtree(var_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['nodes']} nodes x {args.gpus_per_node} GPUs on {result['database']} "
          f"(fleet loaded in {result['load_fleet_s']} s, state file {result['state_file_mb']} MB)")
    print(f"sequential: p50 {seq['p50_ms']} ms, p99 {seq['p99_ms']} ms, {seq['deploys_per_s']} deploys/s, "
          f"{seq['failed']} failed of {seq['requests']}")
    print(f"{args.clients} clients: p50 {con['p50_ms']} ms, p99 {con['p99_ms']} ms, {con['deploys_per_s']} deploys/s, "
          f"{con['failed']} failed of {con['requests']}")
    print(f"over-allocations: {result['over_allocations']}")


if __name__ == "__main__":
    main()
