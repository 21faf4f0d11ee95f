"""What the CLI sends: request bodies from flags, files and --set (gpuplane_cli.bodies, the deploy
and rollout commands), and lists read page by page (gpuplane_cli.client)."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuplane_cli.bodies import merged, set_values, string_map
from gpuplane_cli.client import PAGE_LIMIT, Client
from gpuplane_cli.commands.deploy import deploy_body
from gpuplane_cli.commands.rollout import rollout_body
from gpuplane_cli.errors import APIError, UsageError, from_api_error
from gpuplane_cli.main import build_parser


def test_set_values_nest_and_read_as_yaml_scalars():
    assert set_values(["replicas=2", "config.mode=mps", "config.replicas=4", "enabled=true", "name=007", "x="]) == {
        "replicas": 2, "config": {"mode": "mps", "replicas": 4}, "enabled": True, "name": 7, "x": ""}
    assert set_values(["env=[a, b]"]) == {"env": ["a", "b"]}
    with pytest.raises(UsageError, match="--set takes KEY=VALUE"):
        set_values(["novalue"])
    with pytest.raises(UsageError, match="config is already set"):
        set_values(["config=1", "config.mode=mps"])


def test_labels_and_merging():
    assert string_map(["team=search,tier=canary", "app=x"], "--label") == {"team": "search", "tier": "canary", "app": "x"}
    assert merged({"a": 1, "c": {"x": 1, "y": 2}}, {"a": None, "b": 2, "c": {"y": 3, "z": None}}) == \
        {"a": 1, "b": 2, "c": {"x": 1, "y": 3}}


def test_a_deploy_body_is_the_file_then_the_flags_then_set(tmp_path):
    spec = tmp_path / "chat.yaml"
    spec.write_text("name: chat\nmodel: from-file\nmemory_gb: 4\nlabels: {team: search}\n")
    args = build_parser().parse_args([
        "deploy", "-f", str(spec), "--model", "llama-3-8b", "--gpus", "2", "-l", "tier=canary", "--no-gpu-selection",
        "--set", "cpu_milli=500"])
    assert deploy_body(args) == {"name": "chat", "model": "llama-3-8b", "memory_gb": 4,
                                 "labels": {"team": "search", "tier": "canary"},  # -l adds to the file's labels
                                 "gpu_count": 2, "enable_gpu_selection": False, "cpu_milli": 500}
    plain = build_parser().parse_args(["deploy", "x", "--model", "m", "--memory-gb", "8.5"])
    assert deploy_body(plain) == {"name": "x", "model": "m", "memory_gb": 8.5}  # nothing the user did not say


def test_a_rollout_body():
    args = build_parser().parse_args([
        "rollout", "create", "r", "--nodes", "a,b", "--nodes", "c", "--mode", "mig", "--mig-layout", "3g.40gb=2,1g.10gb=1",
        "--on-failure", "rollback", "--window-cron", "0 2 * * SAT", "--window-minutes", "120"])
    assert rollout_body(args) == {
        "name": "r", "nodes": ["a", "b", "c"], "config": {"mode": "mig", "mig_layout": {"3g.40gb": 2, "1g.10gb": 1}},
        "on_failure": "rollback", "maintenance_window": {"cron": "0 2 * * SAT", "duration_minutes": 120, "timezone": "UTC"}}
    by_label = build_parser().parse_args(["rollout", "preview", "-l", "pool=a100", "--mode", "mps", "--replicas", "4"])
    assert rollout_body(by_label) == {"name": "preview", "node_selector": {"pool": "a100"},
                                      "config": {"mode": "mps", "replicas": 4}}
    half_window = build_parser().parse_args(["rollout", "preview", "--mode", "mps", "--window-cron", "0 2 * * *"])
    with pytest.raises(UsageError, match="both --window-cron and --window-minutes"):
        rollout_body(half_window)


def test_lists_are_read_by_offset_until_count(monkeypatch):
    client = Client("https://gp.example", "t")
    asked = []
    rows = [{"id": i} for i in range(1, 1201)]

    def get(path, params=None):
        asked.append((path, dict(params)))
        offset = params["offset"]
        return {"count": len(rows), "next": "http://internal-host/ignored", "results": rows[offset:offset + PAGE_LIMIT]}

    monkeypatch.setattr(client, "get", get)
    assert list(client.pages("deployments/", {"status": ["running", "placed"]})) == rows
    assert [p["offset"] for _, p in asked] == [0, 500, 1000]
    assert all(p["limit"] == PAGE_LIMIT and p["status"] == ["running", "placed"] for _, p in asked)


def test_urls_repeat_list_parameters_and_root_paths_stay_at_the_root():
    client = Client("https://gp.example/", "t")
    assert client.url("deployments/", {"status": ["a", "b"], "name": "chat"}) == \
        "https://gp.example/api/v1/deployments/?status=a&status=b&name=chat"
    assert client.url("/api/schema/") == "https://gp.example/api/schema/"


def test_a_redirect_is_reported_not_followed_so_the_token_stays_put():
    seen: list[tuple[str, str, str | None]] = []

    class Redirecting(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            self.send_response(301)
            self.send_header("Location", "https://gp.example/api/v1/deployments/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = Client(f"http://127.0.0.1:{server.server_port}", "s3cret", timeout_s=10)
        with pytest.raises(APIError) as redirected:
            client.post("deployments/", {"name": "chat"})
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [("POST", "/api/v1/deployments/", "Token s3cret")]  # once, not replayed as a GET elsewhere
    assert (redirected.value.status, redirected.value.location) == (301, "https://gp.example/api/v1/deployments/")
    assert from_api_error(redirected.value).message.startswith(
        "error: the server answered HTTP 301, a redirect to https://gp.example/api/v1/deployments/: ")
