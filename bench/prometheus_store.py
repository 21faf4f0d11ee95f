"""Prometheus store benchmark: what the telemetry of N GPUs costs in Prometheus' TSDB, and /metrics/dcgm.

    python bench/prometheus_store.py --gpus 2000 --seconds 300 --json

What it does, in one process, on a throw-away database (bench.ingest.throwaway_database) with
GPUPLANE_PROMETHEUS_URL set (so the poll keeps only the latest values, as in production):

1. Creates `--gpus` GPUs on ready nodes of 8 (bench.ingest's inventory) and serves gpuplane
   (Django's WSGI app, a thread) on a free local port.
2. Starts Debian's /usr/bin/prometheus (a temporary data dir) scraping `/metrics/dcgm` every 1 s.
3. Polls every 2 s for `--seconds` (two scrapes a poll, so none is missed): the simulated collector reads every GPU and
   `store_poll` stores the readings. Each poll's values are the simulator's 30 s of simulated time
   after the previous poll's (stamped with the real time), so the values change between samples
   as a 30 s poll's do while the run takes 1/15 of the time; Prometheus' timestamp encoding costs
   the same for any regular interval.
4. Counts the DCGM samples Prometheus holds, takes a TSDB snapshot (admin API: the head written
   out as a block, compressed as on disk) and measures it: chunk bytes per sample, index bytes per
   series; then storage per day for 40,000 GPUs at 30 s (5 series per GPU, 2,880 samples per
   series per day), counting the index once per series per day (blocks compact to a day or more).
5. Times `/metrics/dcgm` rendering (nodes.telemetry.exposition.dcgm_exposition) at
   `--render-gpus` GPUs (default 40,000; another throw-away database, after one poll).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")

from bench.ingest import _build_inventory, database_name, throwaway_database  # noqa: E402

FLEET_GPUS = 40_000
POLL_EVERY_S = 2
SERIES_PER_GPU = 5  # DCGM_FI_DEV_GPU_UTIL, _FB_USED, _FB_FREE, _POWER_USAGE, _GPU_TEMP
SAMPLES_PER_SERIES_PER_DAY = 24 * 3600 // 30
DCGM_SERIES = '{__name__=~"DCGM_FI_DEV_.*"}'
DCGM_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


def _serve(app: Any) -> tuple[WSGIServer, str]:
    server = make_server("127.0.0.1", 0, app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_port}"


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _render(gpus: int, seed: int) -> tuple[list[float], int]:
    """`/metrics/dcgm`'s rendering at `gpus` GPUs after one poll: seconds of 5 renderings, and its size."""
    from nodes.collectors.simulated import SimulatedCollector
    from nodes.telemetry.exposition import dcgm_exposition
    from nodes.telemetry.poll import store_poll

    with throwaway_database("prometheus_render"):
        _build_inventory(gpus)
        store_poll(SimulatedCollector(seed=seed).collect(), source="simulated", shard_nodes=250)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            text = dcgm_exposition()
            times.append(time.perf_counter() - t0)
    return times, len(text.encode())


def run(gpus: int, seconds: int, render_gpus: int, seed: int = 42) -> dict[str, Any]:
    import django

    django.setup()
    import requests
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application
    from django.db import connection

    from bench.prometheus_server import instant, running_prometheus, scrape_config
    from nodes.collectors.simulated import SimulatedCollector
    from nodes.telemetry.poll import store_poll

    settings.DEBUG = False
    settings.GPUPLANE_PROMETHEUS_URL = "http://prometheus.bench.invalid"  # the store: the poll keeps latest values only
    polls: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuplane-bench-prom-") as tmp, throwaway_database("prometheus"):
        _build_inventory(gpus)
        server, target = _serve(get_wsgi_application())
        config = scrape_config(target, "/metrics/dcgm", interval_s=1)
        with running_prometheus(Path(tmp), config) as url:
            while not instant(url, 'up{job="gpuplane-dcgm"} == 1'):  # its first scrape, before the first poll
                time.sleep(0.2)
            start = time.time()
            first = datetime.fromtimestamp(int(start) + 1, tz=UTC)
            for k in range(seconds // POLL_EVERY_S):
                real_ts = first + timedelta(seconds=POLL_EVERY_S * k)
                simulated = first + timedelta(seconds=30 * k)
                time.sleep(max(0.0, real_ts.timestamp() - time.time()))
                t0 = time.perf_counter()
                readings = SimulatedCollector(seed=seed, clock=lambda at=simulated: at).collect()
                store_poll([dataclasses.replace(r, ts=real_ts) for r in readings], source="simulated", shard_nodes=250)
                polls.append(time.perf_counter() - t0)
            time.sleep(3)  # the last poll's scrape
            series = int(float(instant(url, f"count({DCGM_SERIES})")[0]["value"][1]))
            # Per metric: count_over_time drops the name, so the metrics' series would collide.
            samples = sum(
                int(float(instant(url, f"sum(count_over_time({metric}[1h]))")[0]["value"][1])) for metric in DCGM_METRICS
            )
            snapshot = requests.post(f"{url}/api/v1/admin/tsdb/snapshot", timeout=300).json()["data"]["name"]
            block_root = Path(tmp) / "data" / "snapshots" / snapshot
            chunk_bytes = sum(_dir_bytes(p) for p in block_root.glob("*/chunks"))
            index_bytes = sum(p.stat().st_size for p in block_root.glob("*/index"))
            total_bytes = _dir_bytes(block_root)
        server.shutdown()
        database = database_name(connection)
    render, exposition_bytes = _render(render_gpus, seed)

    chunk_per_sample = chunk_bytes / samples
    index_per_series = index_bytes / series
    fleet_series = FLEET_GPUS * SERIES_PER_GPU
    fleet_day = fleet_series * (SAMPLES_PER_SERIES_PER_DAY * chunk_per_sample + index_per_series)
    return {
        "benchmark": "prometheus-store",
        "gpus": gpus,
        "seconds": seconds,
        "polls": len(polls),
        "poll_wall_s_p50": round(statistics.median(polls), 3),
        "poll_wall_s_max": round(max(polls), 3),
        "series": series,
        "samples": samples,
        "samples_expected": gpus * SERIES_PER_GPU * len(polls),
        "snapshot_bytes": total_bytes,
        "chunk_bytes": chunk_bytes,
        "index_bytes": index_bytes,
        "chunk_bytes_per_sample": round(chunk_per_sample, 3),
        "index_bytes_per_series": round(index_per_series, 1),
        "bytes_per_gpu_per_day": round(SERIES_PER_GPU * (SAMPLES_PER_SERIES_PER_DAY * chunk_per_sample + index_per_series)),
        "fleet_gpus": FLEET_GPUS,
        "fleet_mb_per_day": round(fleet_day / 1e6, 1),
        "exposition_gpus": render_gpus,
        "exposition_render_s_p50": round(statistics.median(render), 4),
        "exposition_bytes": exposition_bytes,
        "database": database,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpus", type=int, default=2000, help="GPUs in the simulated fleet (8 per node)")
    parser.add_argument("--seconds", type=int, default=300, help="how long to poll (one poll every 2 s, each 30 s of simulated time)")
    parser.add_argument("--render-gpus", type=int, default=FLEET_GPUS, help="GPUs for timing /metrics/dcgm's rendering")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    if args.gpus < 1 or args.seconds < 1:
        parser.error("--gpus and --seconds must be at least 1")
    result = run(args.gpus, args.seconds, args.render_gpus, args.seed)
    if args.json:
        print(json.dumps(result), flush=True)
        return 0
    print(f"Prometheus store, {result['gpus']:,} GPUs, {result['polls']} polls, scraped every 1 s")
    print(f"  samples in Prometheus   {result['samples']:>12,} of {result['samples_expected']:,}")
    print(f"  chunk bytes / sample    {result['chunk_bytes_per_sample']:>12}")
    print(f"  index bytes / series    {result['index_bytes_per_series']:>12}")
    print(f"  40,000 GPUs at 30 s     {result['fleet_mb_per_day']:>12} MB/day")
    print(f"  /metrics/dcgm render    {result['exposition_render_s_p50']:>12} s at {result['exposition_gpus']:,} GPUs "
          f"({result['exposition_bytes']:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
