"""Inventory sync benchmark: what a sync of an unchanged cluster costs at N nodes (issue 11, must-show 4).

    python bench/inventory_sync.py --nodes 5000 --json     # one JSON object (5,000 nodes x 8 GPUs)

What it does, in one process:

1. Creates a throw-away database (a temporary SQLite file, or `gpuplane_bench_inventory_<pid>` on
   PostgreSQL when DATABASE_URL names one) and a simulated cluster in a temporary state file; the
   configured database and var/ are never touched.
2. Loads `--nodes` nodes of `--gpus-per-node` GPUs with the fleet loader (`nodes.fleet_loader`),
   whose first sync lists the cluster and writes every row.
3. Times `--syncs` syncs of the unchanged cluster (each watches from the stored resourceVersions):
   CPU seconds of this process (time.process_time), of which in the backend's watch calls, and
   the INSERT/UPDATE/DELETE statements and queries each issued. Reported: medians, max writes.
4. For comparison: one relist of the unchanged cluster (what every sync cost before the watch:
   read everything, compare every row), and one sync after one node was cordoned.
5. Another process synced since (`--syncs` rounds): a second process (its own mirror, as the
   Celery worker's other process keeps) cordons nothing but syncs a node cordoned after the first
   process's mirror; the first process's next sync is timed: it catches up by watching from its
   mirror (before: a full relist, as in 4).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")

from bench.ingest import database_name, throwaway_database  # noqa: E402

WRITES = ("INSERT", "UPDATE", "DELETE")


def _timed_sync(cluster: Any, **kwargs: Any) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from nodes.inventory.sync import sync_inventory

    with CaptureQueriesContext(connection) as queries:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        report = sync_inventory(cluster, **kwargs)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)]
    return {"cpu_s": cpu, "wall_s": wall, "writes": len(writes), "queries": len(queries.captured_queries),
            "mode": report.mode, "events": report.events, "changed": report.changed}


class _Process:
    """A worker process's own mirror of the cluster: syncs run with it as the module's mirrors."""

    def __init__(self, mirrors: dict[str, Any] | None = None) -> None:
        self.mirrors: dict[str, Any] = mirrors if mirrors is not None else {}

    def sync(self, cluster: Any) -> dict[str, Any]:
        from nodes.inventory import watching

        watching._mirrors = self.mirrors  # what another process's memory would hold
        return _timed_sync(cluster)


class _WatchTimer:
    """Counts the CPU the backend spends in its watch calls (the simulated cluster's state file)."""

    def __init__(self, cluster: Any) -> None:
        self.cpu_s = 0.0
        for name in ("watch_nodes", "watch_gpu_pods"):
            setattr(cluster, name, self._timed(getattr(cluster, name)))

    def _timed(self, call: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu0 = time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                self.cpu_s += time.process_time() - cpu0
        return timed


def run(nodes: int, gpus_per_node: int, syncs: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from nodes.cluster.sim import SimulatedCluster
    from nodes.fleet_loader import load_fleet

    with tempfile.TemporaryDirectory(prefix="gpuplane-bench-sim-") as sim_dir, throwaway_database("inventory"):
        settings.GPUPLANE_SIMULATED_STATE = str(Path(sim_dir) / "cluster.json")
        settings.GPUPLANE_CLUSTER = "simulated"
        cpu0, wall0 = time.process_time(), time.perf_counter()
        outcome = load_fleet(nodes, gpus_per_node=gpus_per_node)
        load = {"cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - wall0,
                "mode": outcome.report.mode}
        cluster = SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, mig_reconfigure_s=0, plugin_restart_s=0)
        timer = _WatchTimer(cluster)
        runs = []
        for _ in range(syncs):
            before = timer.cpu_s
            result = _timed_sync(cluster)
            result["backend_watch_cpu_s"] = timer.cpu_s - before
            runs.append(result)
        relist = _timed_sync(cluster, relist=True)
        names = [node.name for node in cluster.list_nodes()]
        cluster.cordon(names[0])
        one_changed = _timed_sync(cluster)
        catch_ups = _other_process_synced_since(cluster, timer, names[1:syncs + 1])
        return {
            "benchmark": "inventory_sync",
            "nodes": nodes,
            "gpus": nodes * gpus_per_node,
            "database": database_name(connection),
            "machine": f"{platform.node()} ({os.cpu_count()} cores), load average {os.getloadavg()[0]:.2f}",
            "load_fleet": load,
            "unchanged": {
                "syncs": syncs,
                "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
                "median_backend_watch_cpu_s": statistics.median(r["backend_watch_cpu_s"] for r in runs),
                "median_wall_s": statistics.median(r["wall_s"] for r in runs),
                "max_writes": max(r["writes"] for r in runs),
                "max_queries": max(r["queries"] for r in runs),
                "modes": sorted({r["mode"] for r in runs}),
            },
            "relist_unchanged": relist,
            "one_node_cordoned": one_changed,
            "other_process_synced_since": {
                "syncs": len(catch_ups),
                "median_cpu_s": statistics.median(r["cpu_s"] for r in catch_ups),
                "median_backend_watch_cpu_s": statistics.median(r["backend_watch_cpu_s"] for r in catch_ups),
                "max_writes": max(r["writes"] for r in catch_ups),
                "max_queries": max(r["queries"] for r in catch_ups),
                "modes": sorted({r["mode"] for r in catch_ups}),
            },
        }


def _other_process_synced_since(cluster: Any, timer: _WatchTimer, names: list[str]) -> list[dict[str, Any]]:
    """Per name: it is cordoned, another process syncs it, then this process's sync is timed."""
    from nodes.inventory import watching

    this, other = _Process(watching._mirrors), _Process()
    other.sync(cluster)  # its first sync: a relist, not timed
    runs = []
    for name in names:
        cluster.cordon(name)
        other.sync(cluster)
        before = timer.cpu_s
        result = this.sync(cluster)
        result["backend_watch_cpu_s"] = timer.cpu_s - before
        runs.append(result)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--syncs", type=int, default=5, help="unchanged syncs timed (median reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = run(args.nodes, args.gpus_per_node, args.syncs)
    if args.json:
        print(json.dumps(result))
        return
    unchanged = result["unchanged"]
    print(f"{result['nodes']} nodes, {result['gpus']} GPUs on {result['database']}, {result['machine']}")
    print(f"unchanged sync: {unchanged['median_cpu_s']:.3f} CPU-s median "
          f"({unchanged['median_backend_watch_cpu_s']:.3f} in the backend's watch), "
          f"{unchanged['max_writes']} writes, {unchanged['max_queries']} queries, mode {unchanged['modes']}")
    relist, changed = result["relist_unchanged"], result["one_node_cordoned"]
    print(f"relist of the unchanged cluster: {relist['cpu_s']:.3f} CPU-s, {relist['writes']} writes")
    print(f"one node cordoned: {changed['cpu_s']:.3f} CPU-s, {changed['writes']} writes")
    since = result["other_process_synced_since"]
    print(f"another process synced since: {since['median_cpu_s']:.3f} CPU-s median, "
          f"{since['max_writes']} writes, mode {since['modes']}")


if __name__ == "__main__":
    main()
