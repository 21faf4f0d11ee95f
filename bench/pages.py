"""Fleet pages benchmark: server time and bytes of the overview, its node map API and /metrics at N nodes.

    python bench/pages.py --nodes 5000 --json          # one JSON object (5,000 nodes x 8 GPUs)
    python bench/pages.py --nodes 500 --gpus-per-node 8

What it does, in one process:

1. Creates a throw-away database with Django's test-database utilities (a temporary SQLite file,
   or `gpuplane_bench_pages_<pid>` on PostgreSQL when DATABASE_URL names one), migrates it, and
   destroys it at the end. The configured (development) database is never touched.
2. Builds `--nodes` nodes of `--gpus-per-node` GPUs with bench.synthetic_fleet.make_fleet (bulk
   inserts: partitions, allocations, telemetry on 6 of every 7 nodes, some nodes cordoned or
   NotReady) and signs a viewer in.
3. GETs `/`, `/api/v1/heatmap/` and `/metrics` through Django's test client and the whole stack
   (middleware, session, role check, view, template), `--repeat` times each:
   - cold: the per-poll cache cleared first, so the figures are computed from the database;
   - warm: straight after, served from the cache (what every further request within one poll
     interval costs).
   Reported: the median wall and CPU (time.process_time, this process) milliseconds, the
   response's bytes, and the queries of one cold request.
4. The poll task's refresh (nodes.fleet.refresh_per_poll: every per-poll figure computed and
   stored before any request asks), `--repeat` times on an empty cache: median wall and CPU ms,
   and the overview's CPU ms on the request straight after it (what a request pays when the poll
   task has refreshed).
5. With `--browser`: serves the fleet on a live server thread and, in headless Debian chromium
   (/usr/bin/chromium, through Playwright), signs in, waits until the overview has drawn its node
   map, checks it has one tile per node, clicks the first tile and waits for that node's page to
   list its GPUs. Reported: seconds to the drawn map and to the node page (`--screenshot DIR`
   keeps both screenshots).

The fleet cache is an in-memory cache here, so nothing is written under var/. DEBUG is off; the
test client keeps one database connection for the run (as DATABASE_CONN_MAX_AGE > 0 does).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")

from bench.ingest import database_name, throwaway_database  # noqa: E402

PAGES = {"overview": "/", "node_map_api": "/api/v1/heatmap/", "metrics": "/metrics"}


def _timed(client: Any, url: str) -> tuple[float, float, int]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    response = client.get(url)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if response.status_code != 200:
        raise RuntimeError(f"GET {url}: {response.status_code} {response.content[:300]!r}")
    return wall * 1000, cpu * 1000, len(response.content)


def _browse(base: str, nodes: int, gpus_per_node: int, password: str, screenshots: Path | None) -> dict[str, Any]:
    """The overview in a real browser at this fleet size, then a drill-down into the first node."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True)
        page = browser.new_page(viewport={"width": 1360, "height": 900})
        page.goto(f"{base}/accounts/login/")
        page.get_by_label("Username").fill("bench-viewer")
        page.get_by_label("Password").fill(password)
        start = time.perf_counter()
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_selector("[data-heatmap][data-loaded]", timeout=120_000)
        map_s = time.perf_counter() - start
        tiles = page.evaluate(
            """() => { const d = document.querySelector('[data-heatmap-chart]').data;
                       return d[0].z.flat().filter((v) => v !== null).length + d[1].z.flat().filter((v) => v !== null).length; }"""
        )
        if tiles != nodes:
            raise RuntimeError(f"the node map drew {tiles} tiles for {nodes} nodes")
        expect(page.locator("[data-heatmap-meta]")).to_contain_text(f"{nodes} nodes · ")
        if screenshots:
            page.screenshot(path=str(screenshots / "overview.png"), full_page=False)
        columns = len(page.evaluate("() => document.querySelector('[data-heatmap-chart]').data[1].z[0]"))
        lines = len(page.evaluate("() => document.querySelector('[data-heatmap-chart]').data[1].z"))
        box = page.locator("[data-heatmap] .nsewdrag").first.bounding_box()
        assert box is not None
        start = time.perf_counter()
        page.mouse.click(box["x"] + box["width"] * 0.5 / columns, box["y"] + box["height"] * 0.5 / lines)
        page.wait_for_url(f"{base}/nodes/bench-00000/", timeout=60_000)
        expect(page.get_by_role("link", name=f"GPU {gpus_per_node - 1}").first).to_be_visible()
        node_s = time.perf_counter() - start
        if screenshots:
            page.screenshot(path=str(screenshots / "node.png"), full_page=False)
        browser.close()
    return {"tiles": tiles, "overview_drawn_s": round(map_s, 2), "node_page_s": round(node_s, 2)}


def run(nodes: int, gpus_per_node: int, repeat: int, browser: bool = False, screenshots: Path | None = None) -> dict[str, Any]:
    """Run the benchmark on a throw-away database; return the figures (see the module docstring)."""
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.core.cache import caches
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, override_settings
    from django.utils import timezone

    from bench.synthetic_fleet import make_fleet
    from gpuplane.roles import VIEWER
    from nodes.fleet import CACHE_ALIAS

    settings.DEBUG = False
    # One connection for the whole run, as a server with persistent connections keeps (and so the
    # query count of a request can be read): no closing between requests.
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    memory_cache = {**settings.CACHES, CACHE_ALIAS: {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with throwaway_database("pages"):
        with override_settings(CACHES=memory_cache):
            build0 = time.perf_counter()
            make_fleet(nodes, gpus_per_node, prefix="bench", sampled_at=timezone.now() - timedelta(seconds=5))
            build_s = time.perf_counter() - build0
            password = f"bench-{os.getpid()}-{time.time_ns()}"
            user = User.objects.create_user("bench-viewer", password=password)
            user.groups.add(Group.objects.get_or_create(name=VIEWER)[0])
            client = Client()
            client.force_login(user)
            cache = caches[CACHE_ALIAS]
            figures: dict[str, Any] = {}
            for name, url in PAGES.items():
                cache.clear()
                connection.queries_log.clear()  # a full log (it keeps 9,000) would count nothing new
                with CaptureQueriesContext(connection) as queries:
                    _timed(client, url)  # warm-up: imports, template loading; counts the queries
                query_count = len(queries)  # read now: it is a slice of the live query log
                cold, warm = [], []
                for _ in range(repeat):
                    cache.clear()
                    cold.append(_timed(client, url))
                    warm.append(_timed(client, url))
                figures[name] = {
                    "url": url,
                    "cold_wall_ms": round(statistics.median(r[0] for r in cold), 1),
                    "cold_cpu_ms": round(statistics.median(r[1] for r in cold), 1),
                    "warm_wall_ms": round(statistics.median(r[0] for r in warm), 1),
                    "warm_cpu_ms": round(statistics.median(r[1] for r in warm), 1),
                    "bytes": cold[-1][2],
                    "queries_cold": query_count,
                }
            from nodes.fleet import refresh_per_poll

            refreshes, after_refresh = [], []
            for _ in range(repeat):
                cache.clear()
                wall0, cpu0 = time.perf_counter(), time.process_time()
                refresh_per_poll()
                refreshes.append(((time.perf_counter() - wall0) * 1000, (time.process_time() - cpu0) * 1000))
                after_refresh.append(_timed(client, PAGES["overview"])[1])
            refresh = {
                "wall_ms": round(statistics.median(r[0] for r in refreshes), 1),
                "cpu_ms": round(statistics.median(r[1] for r in refreshes), 1),
                "overview_after_cpu_ms": round(statistics.median(after_refresh), 1),
            }
            browsed = None
            if browser:
                from django.contrib.staticfiles.handlers import StaticFilesHandler
                from django.test.testcases import LiveServerThread

                server = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
                server.daemon = True
                server.start()
                server.is_ready.wait()
                if server.error:
                    raise server.error
                try:
                    browsed = _browse(f"http://127.0.0.1:{server.port}", nodes, gpus_per_node, password, screenshots)
                finally:
                    server.terminate()
        database = database_name(connection)
    return {
        "benchmark": "fleet-pages",
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "gpus": nodes * gpus_per_node,
        "repeat": repeat,
        "build_s": round(build_s, 1),
        "pages": figures,
        "refresh": refresh,
        "browser": browsed,
        "database": database,
        "python": platform.python_version(),
        "django": django.get_version(),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="cold and warm requests per page (medians reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--browser", action="store_true", help="also load the overview and a node in chromium")
    parser.add_argument("--screenshot", type=Path, help="with --browser: a folder for the screenshots")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.gpus_per_node < 1 or args.repeat < 1:
        parser.error("--nodes, --gpus-per-node and --repeat must be at least 1")

    result = run(args.nodes, args.gpus_per_node, args.repeat, args.browser, args.screenshot)
    if args.json:
        print(json.dumps(result), flush=True)
        return 0
    print(f"fleet pages, {result['database']}, {result['nodes']:,} nodes x {result['gpus_per_node']} GPUs "
          f"= {result['gpus']:,} GPUs, median of {result['repeat']}, Python {result['python']}, {result['cpus']} CPUs")
    print(f"  {'page':<14}{'cold ms':>10}{'cold CPU ms':>13}{'warm ms':>10}{'bytes':>12}{'queries':>9}")
    for name, row in result["pages"].items():
        print(f"  {name:<14}{row['cold_wall_ms']:>10.1f}{row['cold_cpu_ms']:>13.1f}{row['warm_wall_ms']:>10.1f}"
              f"{row['bytes']:>12,}{row['queries_cold']:>9}")
    r = result["refresh"]
    print(f"  poll refresh: {r['wall_ms']:.1f} ms, {r['cpu_ms']:.1f} ms CPU; overview after it {r['overview_after_cpu_ms']:.1f} ms CPU")
    if result["browser"]:
        b = result["browser"]
        print(f"  browser: {b['tiles']:,} tiles drawn {b['overview_drawn_s']} s after sign-in; node page in {b['node_page_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
