"""Where a deploy's time goes: cProfile of `scheduler.services.deploy` in one process, per part.

    python bench/deploy_profile.py --nodes 5000 --deploys 20 \\
        --database-url postgres://postgres@127.0.0.1:5432/gpuplane_bench

Like bench/deploy_api.py it drops and creates the database named by --database-url (never the
test suite's), migrates it and loads a simulated fleet (`load_fleet`), then runs `ANALYZE` (as a
live database would have statistics) and deploys one-GPU exclusive inference deployments in this
process, without HTTP. It prints the milliseconds per deploy spent in each part of the path:
bringing the snapshot up to date, the decision, the reservation, the simulated cluster's
workload create. The profiler inflates every figure; compare the parts, not the totals with
bench/deploy_api.py.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.deploy_api import DEFAULT_DATABASE_URL, recreate_database  # noqa: E402

# (function, file it is defined in): the parts reported, outermost first.
PARTS = (
    ("place_replicas", "scheduler/services/placing.py"),
    ("_decide_and_reserve", "scheduler/services/placing.py"),
    ("refresh", "scheduler/services/snapshots.py"),
    ("placement_scheduler", "scheduler/services/deciding.py"),
    ("namespace_quota", "scheduler/adapters.py"),
    ("decide", "scheduler/services/deciding.py"),
    ("_reserve", "scheduler/services/placing.py"),
    ("_start", "scheduler/services/placing.py"),
    ("create_workloads", "scheduler/services/execution.py"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--deploys", type=int, default=20)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--top", type=int, default=0, help="also print the N functions with most own time")
    parser.add_argument("--statements", action="store_true",
                        help="also list the SQL statements of one deploy (after the profiled ones)")
    args = parser.parse_args()

    var_dir = Path(tempfile.mkdtemp(prefix="gpuplane-profile-"))
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "gpuplane.settings",
        "DATABASE_URL": args.database_url,
        "GPUPLANE_VAR_DIR": str(var_dir),
        "GPUPLANE_CLUSTER": "simulated",
        "GPUPLANE_SIMULATED_STATE": str(var_dir / "simulated-cluster.json"),
    })
    os.environ.pop("REDIS_URL", None)
    recreate_database(args.database_url)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from nodes.fleet_loader import load_fleet
    from scheduler.services import DeploySpec, deploy, placing

    placing.enqueue_watch = lambda deployment_id: None  # no broker here
    call_command("migrate", verbosity=0)
    load_fleet(args.nodes, replace=True)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    def one(number: int) -> None:
        deploy(DeploySpec(name=f"profile-{number}", model="llama-3-8b", memory_gb=8, sharing="exclusive"))

    one(0)  # builds this process's snapshot: not what later deploys pay
    profile = cProfile.Profile()
    walls = []
    try:
        for number in range(1, args.deploys + 1):
            started = time.perf_counter()
            profile.enable()
            one(number)
            profile.disable()
            walls.append(time.perf_counter() - started)
        with CaptureQueriesContext(connection) as queries:  # one more deploy, unprofiled: its statements
            one(args.deploys + 1)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    cumulative = dict.fromkeys(PARTS, 0.0)
    for (file, _line, function), (_cc, _nc, _tt, total, _callers) in stats.items():
        for name, path in PARTS:
            if function == name and file.endswith(path):
                cumulative[(name, path)] += total
    print(f"{args.nodes} nodes on {connection.vendor}, {args.deploys} deploys (ms per deploy, under cProfile)")
    for (name, path), total in cumulative.items():
        print(f"  {name:22s} {total / args.deploys * 1000:8.1f}   {path}")
    if args.top:
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    walls.sort()
    print(f"  wall per deploy: p50 {walls[len(walls) // 2] * 1000:.0f} ms, max {walls[-1] * 1000:.0f} ms")
    print(f"  statements in one deploy: {len(queries.captured_queries)}")
    if args.statements:
        for number, query in enumerate(queries.captured_queries, 1):
            print(f"  {number:3d}. {query['sql'][:160]}")


if __name__ == "__main__":
    main()
