"""Stand-ins the agent tests drive it with.

- `TelemetrySink`, a small real HTTP server in a thread that stores samples under the same unique
  (gpu_uuid, ts) key as GPUSample and can be stopped and restarted on its port, or made to store a
  batch and then lose the answer;
- `FakeTime`, a fake clock: the agent's sleep advances it, so minutes pass in milliseconds;
- `FakeCollector`, two GPUs whose readings are stamped with the fake clock.
"""
from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from nodes.agent import TelemetryAgent
from nodes.collectors.base import CollectorUnavailable, GPUReading

TOKEN = "agent-key-for-gpu-node-1"
NODE = "gpu-node-1"
START = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


class TelemetrySink:
    """A stand-in telemetry endpoint with GPUSample's unique (gpu_uuid, ts) semantics.

    `mode`: "ok" (201 {"stored", "duplicates"}), "lose-answer" (store the batch, then close the
    connection without answering, once), or an HTTP status to answer without storing.
    `refuse(sample) -> (messages, retry) | None` refuses samples one by one, as the API does
    (207, or 400 when it refused them all). GPU reports (`/api/v1/nodes/<node>/gpu-report/`)
    are kept in `reports`; `paths` lists every request's path in order.
    """

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.posts: list[list[dict[str, Any]]] = []  # every batch received, stored or not
        self.reports: list[list[dict[str, Any]]] = []
        self.reports_status: int | None = None  # answer GPU reports with this status instead
        self.paths: list[str] = []
        self.refuse: Callable[[dict[str, Any]], tuple[dict[str, list[str]], bool] | None] | None = None
        self.mode: str | int = "ok"
        self.headers: dict[str, str] = {}
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                sink.paths.append(self.path)
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._answer(401, {"detail": "Invalid agent token."})
                    return
                if self.path == f"/api/v1/nodes/{NODE}/gpu-report/":
                    if sink.reports_status is not None:
                        self._answer(sink.reports_status, {"detail": "not now"})
                        return
                    sink.reports.append(body["gpus"])
                    self._answer(200, {"changed": True, "revision": len(sink.reports), "bound": [],
                                       "unknown_indexes": [], "conflicts": []})
                    return
                if self.path != "/api/v1/telemetry/":
                    self._answer(404, {"detail": "Not found."})
                    return
                samples = body["samples"]
                sink.posts.append(samples)
                sink.headers = dict(self.headers)
                if isinstance(sink.mode, int):
                    headers = {"Retry-After": "120"} if sink.mode == 429 else {}
                    self._answer(sink.mode, {"samples": ["refused by the test"]}, headers)
                    return
                refused: dict[str, dict[str, list[str]]] = {}
                retry = []
                for index, sample in enumerate(samples):
                    verdict = sink.refuse(sample) if sink.refuse else None
                    if verdict is not None:
                        refused[str(index)], retryable = verdict
                        if retryable:
                            retry.append(index)
                new = 0
                for index, sample in enumerate(samples):
                    if str(index) in refused:
                        continue
                    key = (sample["gpu_uuid"], sample["ts"])
                    if key not in sink.stored:
                        sink.stored[key] = sample
                        new += 1
                if sink.mode == "lose-answer":
                    sink.mode = "ok"
                    self.close_connection = True
                    self.connection.close()  # stored, but the agent never hears of it
                    return
                taken = len(samples) - len(refused)
                if not refused:
                    self._answer(201, {"stored": new, "duplicates": taken - new})
                    return
                self._answer(207 if taken else 400, {
                    "stored": new, "duplicates": taken - new, "refused": len(refused), "samples": refused, "retry": retry,
                })

            def _answer(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        # The same port after a restart, as a restarted Service would be (SO_REUSEADDR is on).
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()  # connections are refused from now on
        self.server = None

    @property
    def running(self) -> bool:
        return self.server is not None



class FakeTime:
    """Monotonic clock + sleep for the agent; `on_sleep` hooks let a test act at given times."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.hooks: list[tuple[float, Callable[[], None]]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        for when, action in list(self.hooks):
            if self.now >= when:
                self.hooks.remove((when, action))
                action()

    def at(self, when: float, action: Callable[[], None]) -> None:
        self.hooks.append((when, action))


class FakeCollector:
    """Two GPUs whose readings are stamped with the fake clock's wall time (START + elapsed)."""

    name = "nvml"

    def __init__(self, fake_time: FakeTime, gpus: tuple[str, ...] = ("GPU-0", "GPU-1")) -> None:
        self.time = fake_time
        self.gpus = gpus
        self.fail = False

    def collect(self) -> list[GPUReading]:
        if self.fail:
            raise CollectorUnavailable("NVML could not be initialised (Driver Not Loaded)")
        ts = START + timedelta(seconds=round(self.time.now))
        return [
            GPUReading(gpu_uuid=uuid, index=i, ts=ts, utilization_pct=float(i * 10), memory_used_mib=1024,
                       memory_total_mib=81559, power_w=100.0, power_limit_w=700.0, temperature_c=40.0,
                       sm_clock_mhz=None, mig_enabled=False, missing=frozenset({"sm_clock_mhz"}))
            for i, uuid in enumerate(self.gpus)
        ]


def make_agent(url: str, fake_time: FakeTime, collector: Any = None, **options: Any) -> TelemetryAgent:
    return TelemetryAgent(
        url, TOKEN, NODE, collector or FakeCollector(fake_time),
        sleep=fake_time.sleep, clock=fake_time.clock, rng=random.Random(4), **options,
    )
