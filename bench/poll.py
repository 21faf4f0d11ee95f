"""Telemetry poll benchmark: one server-side poll of a whole fleet, end to end, on the database store.

    python bench/poll.py --gpus 40000 --intervals 3 --json      # one JSON object
    python bench/poll.py --gpus 40000 --intervals 3 --shard-nodes 250
    python bench/poll.py --gpus 40000 --intervals 3 --json --database-url postgres://postgres@127.0.0.1/bench

What it does, in one process, on a throw-away database (bench.ingest.throwaway_database: a
temporary SQLite file, or `gpuplane_bench_poll_<pid>` beside a configured PostgreSQL; `--database-url`
sets DATABASE_URL for the run):

1. Creates `--gpus` GPUs on ceil(gpus / 8) ready nodes (bench.ingest's inventory).
2. Polls `--intervals` times, 30 s of simulated time apart (the last at now), doing what
   `poll_metrics_task` does once its slot and lock guards pass: the simulated collector reads every
   GPU (`SimulatedCollector.collect`), then `nodes.telemetry.poll.store_poll` stores the readings
   `--shard-nodes` nodes per transaction. Each poll is timed whole (wall and this process's CPU).
3. Checks that every GPU has a sample for every interval (`samples_lost` counts the missing) and
   measures what the samples cost on disk: the database's used pages (SQLite: page_count minus
   freelist_count; PostgreSQL: pg_total_relation_size of the sample table's partitions, indexes
   included, nodes.telemetry.partitions) before and after, divided by the samples stored, times
   2,880 samples per GPU per day (one every 30 s). That is raw-sample storage during TELEMETRY_RAW_RETENTION_H; rollups add
   one row per GPU per 5 minutes on top.

The requirement (issue 11, must-show 2): 40,000 GPUs every 30 s, every interval stored, one poll
under 10 s wall.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")

from bench.ingest import GPUS_PER_NODE, INTERVAL_S, _build_inventory, database_name, throwaway_database  # noqa: E402

SAMPLES_PER_GPU_PER_DAY = 24 * 3600 // INTERVAL_S


def _at(ts: datetime) -> datetime:
    return ts


def used_bytes(connection: Any) -> int:
    """Bytes the sample table uses now: SQLite's whole file less its free pages, PostgreSQL's table and indexes."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA freelist_count")
            pages -= cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            return int(pages * cursor.fetchone()[0])
        # A partitioned table has no storage of its own: sum its partitions (or the plain table).
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('nodes_gpusample')"
        )
        return int(cursor.fetchone()[0])


def partition_use(connection: Any) -> tuple[int, int]:
    """PostgreSQL: (partitions holding at least one sample, samples in the DEFAULT partition); (0, 0) on SQLite."""
    if connection.vendor == "sqlite":
        return 0, 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT tableoid), count(*) FILTER (WHERE tableoid = 'nodes_gpusample_default'::regclass) "
            "FROM nodes_gpusample"
        )
        used, in_default = cursor.fetchone()
        return int(used), int(in_default)


def run(gpus: int, intervals: int, shard_nodes: int, seed: int = 42) -> dict[str, Any]:
    """Run the benchmark on a throw-away database; return the figures (see the module docstring)."""
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from nodes.collectors.simulated import SimulatedCollector
    from nodes.models import GPU, GPUSample
    from nodes.telemetry.poll import store_poll

    settings.DEBUG = False  # as in production: no query log
    polls: list[dict[str, Any]] = []
    with throwaway_database("poll"):
        inventory = _build_inventory(gpus)
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=INTERVAL_S * (intervals - 1))
        slots = [start + timedelta(seconds=INTERVAL_S * k) for k in range(intervals)]
        bytes_before = used_bytes(connection)
        for ts in slots:
            collector = SimulatedCollector(seed=seed, clock=functools.partial(_at, ts))
            wall0, cpu0 = time.perf_counter(), time.process_time()
            readings = collector.collect()
            collected_s = time.perf_counter() - wall0
            report = store_poll(readings, source=collector.name, shard_nodes=shard_nodes)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            polls.append({
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "collect_wall_s": round(collected_s, 3),
                "stored": report.stored,
                "shards": report.shards,
                "failed_shards": report.failed_shards,
            })
        bytes_after = used_bytes(connection)
        stored = GPUSample.objects.count()
        per_slot = {ts: GPUSample.objects.filter(ts=ts).count() for ts in slots}
        stale_rows = GPU.objects.exclude(sampled_at=slots[-1]).count()
        partitions_used, in_default = partition_use(connection)
        database = database_name(connection)

    expected = gpus * intervals
    bytes_per_sample = (bytes_after - bytes_before) / stored if stored else 0.0
    return {
        "benchmark": "telemetry-poll",
        "gpus": gpus,
        "nodes": len(inventory),
        "intervals": intervals,
        "interval_s": INTERVAL_S,
        "shard_nodes": shard_nodes,
        "samples_stored": stored,
        "samples_lost": expected - stored,
        "intervals_complete": sum(1 for count in per_slot.values() if count == gpus),
        "gpu_rows_not_latest": stale_rows,
        "poll_wall_s_p50": round(statistics.median(p["wall_s"] for p in polls), 3),
        "poll_cpu_s_p50": round(statistics.median(p["cpu_s"] for p in polls), 3),
        "poll_wall_s_max": max(p["wall_s"] for p in polls),
        "bytes_per_sample": round(bytes_per_sample, 1),
        "bytes_per_gpu_per_day": round(bytes_per_sample * SAMPLES_PER_GPU_PER_DAY),
        "fleet_gb_per_day": round(bytes_per_sample * SAMPLES_PER_GPU_PER_DAY * gpus / 1e9, 2),
        "partitions_used": partitions_used,
        "samples_in_default_partition": in_default,
        "per_poll": polls,
        "database": database,
        "python": platform.python_version(),
        "django": django.get_version(),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpus", type=int, default=40_000, help=f"GPUs in the simulated fleet ({GPUS_PER_NODE} per node)")
    parser.add_argument("--intervals", type=int, default=3, help="polls, 30 s of simulated time apart")
    parser.add_argument("--shard-nodes", type=int, default=None,
                        help="nodes per transaction (default: settings.TELEMETRY_POLL_SHARD_NODES)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    parser.add_argument("--database-url", default=None,
                        help="DATABASE_URL to run beside (a throw-away database is made next to it; default: the env's)")
    args = parser.parse_args(argv)
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url  # before django.setup() reads the settings
    if args.gpus < 1 or args.intervals < 1 or (args.shard_nodes is not None and args.shard_nodes < 1):
        parser.error("--gpus, --intervals and --shard-nodes must be at least 1")
    if args.shard_nodes is None:
        import django
        from django.conf import settings

        django.setup()
        args.shard_nodes = settings.TELEMETRY_POLL_SHARD_NODES

    result = run(args.gpus, args.intervals, args.shard_nodes, args.seed)
    if args.json:
        print(json.dumps(result), flush=True)
        return 0
    print(f"telemetry poll, {result['database']}, {result['gpus']:,} GPUs on {result['nodes']:,} nodes, "
          f"{result['intervals']} polls, {result['shard_nodes']} nodes per shard, Python {result['python']}")
    print(f"  samples stored / lost   {result['samples_stored']:>10,} / {result['samples_lost']:,}")
    print(f"  poll wall s p50 / max   {result['poll_wall_s_p50']:>10.3f} / {result['poll_wall_s_max']:.3f}")
    print(f"  poll CPU s p50          {result['poll_cpu_s_p50']:>10.3f}")
    print(f"  bytes per GPU per day   {result['bytes_per_gpu_per_day']:>10,}  "
          f"({result['fleet_gb_per_day']} GB/day for the fleet, raw samples)")
    return 0 if result["samples_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
