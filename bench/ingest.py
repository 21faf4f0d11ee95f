"""Telemetry ingest benchmark: samples stored per second through the real API, CPU per 30-s interval.

    python bench/ingest.py --gpus 10000 --json                 # one JSON object
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python bench/ingest.py --gpus 10000 --intervals 5

What it does, end to end in one process:

1. Creates a throw-away database next to the configured one with Django's test-database
   utilities (`gpuplane_bench_ingest_<pid>` on PostgreSQL, a temporary file on SQLite), migrates
   it, and destroys it at the end. The configured (development) database is never touched.
2. Creates `--gpus` GPUs on ceil(gpus / 8) nodes and one agent token per node.
3. Posts `--intervals` intervals (plus one warm-up interval, not measured): in each, every node
   posts one batch of its 8 GPUs' samples to `POST /api/v1/telemetry/` with its agent token
   (`Authorization: Bearer`), as the node agent does every 30 s, through Django's test client and
   the whole stack: middleware, DRF authentication and permissions, the bulk parser
   (nodes.telemetry.batch), and nodes.telemetry.ingest.ingest_samples on the database. One node
   in `--bad-every` (default 10) sends one out-of-range sample among its 8: the server stores the
   other 7 and answers 207 naming the bad one, and the script checks that answer, so the figure
   includes the per-sample answers.
4. Measures per interval the wall time and the CPU time of this process (`time.process_time`),
   which holds both sides, the client and the server, so the CPU figure is an upper bound of the
   server's; and, on PostgreSQL when /proc allows it, the CPU time of the database backend
   process serving the connection (a separate process, reported separately).
5. Then stores as many intervals again straight through nodes.telemetry.ingest.ingest_samples in
   batches of TELEMETRY_MAX_BATCH: the service without HTTP (reported under "service"). The
   server's own poll is timed by bench/poll.py.

The test client keeps one database connection for the whole run, as a server with persistent
connections (DATABASE_CONN_MAX_AGE > 0) does; DEBUG is switched off so queries are not logged.
Figures are medians over the measured intervals; batch latencies are over every measured batch.
The requirement (docs/design.md section 12): 10,000 GPUs every 30 s need well under one core, i.e.
`cpu_seconds_per_interval` well under 30.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")

GPUS_PER_NODE = 8
INTERVAL_S = 30
URL = "/api/v1/telemetry/"
Inventory = list[tuple[str, str, list[str]]]  # (node name, agent key, GPU UUIDs)


def _percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


class BackendCPU:
    """CPU seconds used so far by the PostgreSQL backend serving `connection`; None when unreadable."""

    def __init__(self, connection: Any) -> None:
        self.stat_path: Path | None = None
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid = cursor.fetchone()[0]
            path = Path(f"/proc/{pid}/stat")
            if path.exists():  # same machine, and /proc shows other users' processes
                self.stat_path = path
        self.ticks_per_s = os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float | None:
        if self.stat_path is None:
            return None
        # Fields after the ")" that ends the command name: utime and stime are the 12th and 13th.
        fields = self.stat_path.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.ticks_per_s


@contextlib.contextmanager
def throwaway_database(benchmark: str) -> Iterator[None]:
    """A migrated database beside the configured one for the block, destroyed after it (Django's
    test-database utilities): `gpuplane_bench_<benchmark>_<pid>` on PostgreSQL, a temporary file
    on SQLite. The configured (development) database is never touched. Needs django.setup()."""
    from django.db import connection

    test_settings = connection.settings_dict.setdefault("TEST", {})
    tmp_dir = None
    if connection.vendor == "sqlite":
        tmp_dir = tempfile.TemporaryDirectory(prefix="gpuplane-bench-")
        test_settings["NAME"] = str(Path(tmp_dir.name) / "bench.sqlite3")
    else:
        test_settings["NAME"] = f"gpuplane_bench_{benchmark}_{os.getpid()}"
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        if tmp_dir is not None:
            tmp_dir.cleanup()


def database_name(connection: Any) -> str:
    """"sqlite 3.45.1" or "postgresql 150020": what the figures were measured on."""
    if connection.vendor == "sqlite":
        return f"sqlite {connection.Database.sqlite_version}"
    return f"{connection.vendor} {connection.pg_version}"


def _build_inventory(gpus: int) -> Inventory:
    """Nodes of 8 GPUs (the last may have fewer) and an agent token each: [(node, key, gpu uuids)]."""
    from nodes.authentication import digest_key
    from nodes.models import GPU, Node, NodeAgentToken

    node_count = math.ceil(gpus / GPUS_PER_NODE)
    nodes = Node.objects.bulk_create(
        Node(
            name=f"bench-node-{i:05d}",
            gpu_model="H100-SXM5-80GB",
            gpu_count=min(GPUS_PER_NODE, gpus - i * GPUS_PER_NODE),
        )
        for i in range(node_count)
    )
    rows = [
        GPU(node=node, index=index, uuid=f"GPU-bench-{n:05d}-{index}", model="H100-SXM5-80GB", memory_mib=81920)
        for n, node in enumerate(nodes)
        for index in range(node.gpu_count)
    ]
    GPU.objects.bulk_create(rows, batch_size=2000)
    keys = [f"bench-agent-key-{n:05d}-{random.Random(n).getrandbits(64):016x}" for n in range(node_count)]
    NodeAgentToken.objects.bulk_create(
        NodeAgentToken(node=node, key_digest=digest_key(key), prefix=key[:8])
        for node, key in zip(nodes, keys, strict=True)
    )
    by_node: dict[str, list[str]] = {node.name: [] for node in nodes}
    for gpu in rows:
        by_node[gpu.node.name].append(gpu.uuid)
    return [(node.name, key, by_node[node.name]) for node, key in zip(nodes, keys, strict=True)]


def _post_interval(
    client: Any, inventory: Inventory, ts: datetime, rng: random.Random, bad_every: int = 0
) -> list[float]:
    """Every node posts its batch for `ts`; returns each batch's latency in seconds.

    With `bad_every`, every bad_every-th node's batch carries one sample whose power is past any
    board's (5000 W): the answer must be a 207 storing the others and naming that one.
    """
    stamp = ts.isoformat()
    latencies = []
    for number, (node, key, uuids) in enumerate(inventory):
        body = {
            "node": node,
            "samples": [
                {
                    "gpu_uuid": uuid,
                    "ts": stamp,
                    "utilization_pct": round(rng.uniform(0, 100), 1),
                    "memory_used_mib": rng.randrange(0, 81920),
                    "memory_total_mib": 81920,
                    "power_w": round(rng.uniform(60, 700), 1),
                    "temperature_c": round(rng.uniform(30, 85), 1),
                    "sm_clock_mhz": 1980,
                }
                for uuid in uuids
            ],
        }
        bad = bad_every and number % bad_every == 0 and len(uuids) > 1
        if bad:
            body["samples"][-1]["power_w"] = 5000.0
        started = time.perf_counter()
        response = client.post(URL, body, format="json", HTTP_AUTHORIZATION=f"Bearer {key}")
        latencies.append(time.perf_counter() - started)
        answer = response.json()
        if bad:
            ok = response.status_code == 207 and answer["stored"] == len(uuids) - 1 and list(answer["samples"]) == [
                str(len(uuids) - 1)
            ]
        else:
            ok = response.status_code == 201 and answer["stored"] == len(uuids)
        if not ok:
            raise RuntimeError(f"{node}: HTTP {response.status_code} {response.content[:500]!r}")
    return latencies


def _bad_batches(inventory: Inventory, bad_every: int) -> int:
    """How many batches of one interval carry a bad sample (see `_post_interval`)."""
    if not bad_every:
        return 0
    return sum(1 for number, (_, _, uuids) in enumerate(inventory) if number % bad_every == 0 and len(uuids) > 1)


def _ingest_interval(inventory: Inventory, ts: datetime, rng: random.Random) -> list[float]:
    """The same samples straight into nodes.telemetry.ingest.ingest_samples, TELEMETRY_MAX_BATCH a call."""
    from django.conf import settings

    from nodes.telemetry.ingest import ingest_samples
    from nodes.telemetry.samples import SampleIn

    samples = [
        SampleIn(
            gpu_uuid=uuid,
            ts=ts,
            utilization_pct=round(rng.uniform(0, 100), 1),
            memory_used_mib=rng.randrange(0, 81920),
            memory_total_mib=81920,
            power_w=round(rng.uniform(60, 700), 1),
            temperature_c=round(rng.uniform(30, 85), 1),
            sm_clock_mhz=1980,
        )
        for _, _, uuids in inventory
        for uuid in uuids
    ]
    batch = settings.TELEMETRY_MAX_BATCH
    latencies = []
    for start in range(0, len(samples), batch):
        started = time.perf_counter()
        result = ingest_samples(samples[start : start + batch], source="simulated")
        latencies.append(time.perf_counter() - started)
        if result.stored != len(samples[start : start + batch]):
            raise RuntimeError(f"stored {result.stored} of {batch}")
    return latencies


def run(gpus: int, intervals: int, seed: int = 42, bad_every: int = 10) -> dict[str, Any]:
    """Run the benchmark on a throw-away database; return the figures (see the module docstring)."""
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from rest_framework.test import APIClient

    from nodes.models import GPU, GPUSample

    settings.DEBUG = False  # as in production: no query log
    service_batch = settings.TELEMETRY_MAX_BATCH
    with throwaway_database("ingest"):
        inventory = _build_inventory(gpus)
        client = APIClient()
        rng = random.Random(seed)
        backend_cpu = BackendCPU(connection)
        # Slot 0 warms up, slots 1..K go through the API, K+1..2K through the service alone; the
        # last slot is now, so no sample is refused as being in the future.
        slots = [
            datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=INTERVAL_S * (2 * intervals - k))
            for k in range(2 * intervals + 1)
        ]

        def measured(post_interval: Any, ts: datetime) -> dict[str, Any]:
            wall0, cpu0, db0 = time.perf_counter(), time.process_time(), backend_cpu.seconds()
            latencies = post_interval(ts)
            wall, cpu, db1 = time.perf_counter() - wall0, time.process_time() - cpu0, backend_cpu.seconds()
            return {
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "db_server_cpu_s": None if db0 is None or db1 is None else round(db1 - db0, 3),
                "samples_per_s": round(gpus / wall),
                "latencies": latencies,
            }

        _post_interval(client, inventory, slots[0], rng, bad_every)  # warm-up
        api = [
            measured(lambda ts: _post_interval(client, inventory, ts, rng, bad_every), ts)
            for ts in slots[1 : intervals + 1]
        ]
        service = [measured(lambda ts: _ingest_interval(inventory, ts, rng), ts) for ts in slots[intervals + 1 :]]
        latencies = [latency for row in api for latency in row.pop("latencies")]
        for row in service:
            row.pop("latencies")

        stored = GPUSample.objects.count()
        refused = _bad_batches(inventory, bad_every) * (intervals + 1)  # warm-up and measured API intervals
        expected = gpus * (2 * intervals + 1) - refused
        if stored != expected:
            raise RuntimeError(f"stored {stored} samples, expected {expected}")
        if GPU.objects.exclude(sampled_at=slots[-1]).exists():
            raise RuntimeError("some GPU rows do not show the last interval's sample")
        database = database_name(connection)

    def median(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [row[key] for row in rows if row[key] is not None]
        return round(statistics.median(values), 3) if values else None

    cpu_s = median(api, "cpu_s")
    return {
        "benchmark": "telemetry-ingest",
        "gpus": gpus,
        "nodes": len(inventory),
        "batch_size": GPUS_PER_NODE,
        "bad_every": bad_every,
        "bad_batches_per_interval": _bad_batches(inventory, bad_every),  # answered 207, one sample refused
        "intervals": intervals,
        "interval_s": INTERVAL_S,
        "samples_per_s": round(gpus / median(api, "wall_s")),
        "wall_seconds_per_interval": median(api, "wall_s"),
        "cpu_seconds_per_interval": cpu_s,
        "cpu_share_of_one_core": round(cpu_s / INTERVAL_S, 4),
        "cpu_measures": "client and server, one process (time.process_time)",
        "db_server_cpu_seconds_per_interval": median(api, "db_server_cpu_s"),
        "batch_p50_ms": round(_percentile(latencies, 50) * 1000, 2),
        "batch_p99_ms": round(_percentile(latencies, 99) * 1000, 2),
        # ingest_samples() directly, TELEMETRY_MAX_BATCH samples a call: the API's service without
        # HTTP (poll_metrics_task stores through nodes.telemetry.poll; bench/poll.py times that).
        "service": {
            "batch_size": service_batch,
            "samples_per_s": round(gpus / median(service, "wall_s")),
            "wall_seconds_per_interval": median(service, "wall_s"),
            "cpu_seconds_per_interval": median(service, "cpu_s"),
            "db_server_cpu_seconds_per_interval": median(service, "db_server_cpu_s"),
        },
        "database": database,
        "stored_samples": stored,
        "per_interval": api,
        "python": platform.python_version(),
        "django": django.get_version(),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpus", type=int, default=10_000, help="GPUs in the synthetic cluster (8 per node)")
    parser.add_argument("--intervals", type=int, default=5, help="measured 30-s intervals (after one warm-up)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--bad-every", type=int, default=10,
        help="one node in this many sends one out-of-range sample (answered 207); 0: none (default 10)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    if args.gpus < 1 or args.intervals < 1:
        parser.error("--gpus and --intervals must be at least 1")

    if args.bad_every < 0:
        parser.error("--bad-every must be 0 or more")
    result = run(args.gpus, args.intervals, args.seed, args.bad_every)
    if args.json:
        print(json.dumps(result), flush=True)
        return 0
    print(f"telemetry ingest, {result['database']}, {result['gpus']:,} GPUs on {result['nodes']:,} nodes, "
          f"{result['intervals']} intervals of {INTERVAL_S} s, Python {result['python']}, {result['cpus']} CPUs")
    print(f"  samples/s          {result['samples_per_s']:>10,}")
    print(f"  wall s / interval  {result['wall_seconds_per_interval']:>10.3f}")
    print(f"  CPU s / interval   {result['cpu_seconds_per_interval']:>10.3f}  "
          f"({result['cpu_share_of_one_core']:.1%} of one core; client + server in one process)")
    if result["db_server_cpu_seconds_per_interval"] is not None:
        db_cpu_s = result["db_server_cpu_seconds_per_interval"]
        print(f"  DB CPU s/interval  {db_cpu_s:>10.3f}  (PostgreSQL backend process)")
    print(f"  batch p50 / p99    {result['batch_p50_ms']:>7.2f} / {result['batch_p99_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
