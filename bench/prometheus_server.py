"""A real Prometheus process: Debian's /usr/bin/prometheus on a free port, scraping gpuplane.

bench/prometheus_store.py measures with it, and the Prometheus store tests run against it
(tests/nodes/prometheus_server.py adds their skip-or-fail when the binary is absent); it lives
here, not under tests/, because a benchmark does not depend on the test package.
"""
from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
import yaml

PROMETHEUS = Path("/usr/bin/prometheus")
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape_config(target: str, metrics_path: str, interval_s: int) -> dict[str, Any]:
    """prometheus.yml scraping `target` (host:port) at `metrics_path` every `interval_s` seconds."""
    interval = f"{interval_s}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{
            "job_name": "gpuplane-dcgm",
            "metrics_path": metrics_path,
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "static_configs": [{"targets": [target]}],
        }],
    }


@contextmanager
def running_prometheus(workdir: Path, config: dict[str, Any], *, executable: Path = PROMETHEUS) -> Iterator[str]:
    """Start Prometheus with `config` and a data dir under `workdir`; yield its URL once ready; stop it."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            str(executable), f"--config.file={config_file}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--web.enable-admin-api", "--log.level=warn",
        ],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {process.returncode}: {(workdir / 'prometheus.log').read_text()}")
            try:
                if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready after {START_TIMEOUT_S} s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def instant(url: str, promql: str) -> list[Any]:
    """An instant query's result vector."""
    answer = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    if answer["status"] != "success":
        raise RuntimeError(f"query {promql!r} failed: {answer}")
    return answer["data"]["result"]
