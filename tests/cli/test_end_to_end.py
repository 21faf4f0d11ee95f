"""Must-show 5: the `gpuplane` CLI end to end against a running server, run as a user runs it.

The server is the real one (pytest-django's live_server: Django's WSGI handler on a socket) on
the simulated demo cluster `make run` seeds; the CLI is a separate process that knows only the
server's URL and its config file. An operator logs in, reads nodes and GPUs (with the figures of
a telemetry poll), deploys, explains the decision, previews, creates and starts a rollout and
watches it to the end while the test plays Celery's part (reconciler ticks and deployment
watches, as tests/e2e/test_browser_rollout_demo.py does); an admin runs and approves a
consolidation plan; everyone reads the savings. `-o json` parses and agrees with the server;
a wrong token, a too-low role, a missing object and a wrong command answer as kubectl does.
"""
from __future__ import annotations

import json
import re
import stat
import time
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.db.models import Q
from knox.models import AuthToken
from rest_framework.test import APIClient

from consolidation.models import ConsolidationPlan
from nodes.cluster.sim import SimulatedCluster
from nodes.models import GPU, Node
from nodes.tasks import poll_metrics_task
from rollouts.models import RollingUpdate
from rollouts.reconciler import reconcile
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment
from scheduler.services.moving import advance_moves
from scheduler.services.watching import watch_deployment
from tests.cli.running import CLIUser
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

TARGETS = ("a100-node-1", "a100-node-3")  # the demo's MPS R=2 nodes
POD_READY_S = 0.3
UNAUTHORIZED = "error: You must be logged in to the server (Unauthorized)\n"
BAR = re.compile(r"\[[#.]{30}\]\s+(\d+\.\d) %")


@pytest.fixture
def demo(isolated_cluster_state: str) -> SimulatedCluster:
    """The demo cluster and deployments `make run` seeds, with one telemetry poll stored (the GPUs' live figures)."""
    call_command("load_demo_cluster", "--if-empty", stdout=StringIO())
    call_command("load_demo_deployments", "--if-empty", stdout=StringIO())
    poll_metrics_task()
    return SimulatedCluster(isolated_cluster_state, pod_ready_delay_s=POD_READY_S)


def tick(cluster: SimulatedCluster) -> None:
    """What beat and the worker do: a reconciler tick, then the watch of each deployment starting a replica."""
    reconcile(cluster=cluster)
    advance_moves(cluster=cluster)
    starting = Q(status=DeploymentStatus.PLACED) | Q(placements__status=PlacementStatus.BINDING)
    for pk in Deployment.objects.filter(starting).distinct().values_list("pk", flat=True):
        watch_deployment(pk, cluster=cluster)


def test_the_cli_against_a_running_server(live_server, demo, operator, admin_user, viewer, tmp_path):
    url = live_server.url
    otto, ada, vera = (CLIUser(tmp_path / name / "config", tmp_path) for name in ("otto", "ada", "vera"))

    # Log in: a token for a password (or a token kept as given), in a file only its owner reads.
    out = otto.ok("login", url, "-u", operator.username, "--password-stdin", stdin=PASSWORD + "\n")
    assert out.startswith(f"Logged in to {url} as {operator.username}")
    assert stat.S_IMODE(otto.config.stat().st_mode) == 0o600
    kept = yaml.safe_load(otto.config.read_text())
    assert kept["server"] == url and kept["token"] and AuthToken.objects.filter(user=operator).count() == 1
    ada.ok("login", url, "-u", admin_user.username, "--password-stdin", stdin=PASSWORD)
    vera.ok("login", url, "--token", AuthToken.objects.create(user=viewer)[1])
    assert vera.fails("login", url, "--token", "wrong-token") == UNAUTHORIZED  # refused, not kept
    assert vera.fails("--token", "wrong-token", "get", "nodes") == UNAUTHORIZED
    assert vera.fails("get", "nodes", GPUPLANE_TOKEN="wrong-token") == UNAUTHORIZED

    # Nodes and GPUs with live figures; -o json parses and agrees with the inventory.
    nodes = json.loads(otto.ok("get", "nodes", "-o", "json"))
    assert nodes["kind"] == "List" and {n["name"] for n in nodes["items"]} == set(Node.objects.values_list("name", flat=True))
    table = otto.ok("get", "nodes").splitlines()
    assert table[0].split()[:3] == ["NAME", "STATUS", "GPU-MODEL"] and len(table) == 1 + Node.objects.count()
    gpus = json.loads(otto.ok("get", "gpus", "--node", "h100-node-1", "-o", "json"))["items"]
    assert len(gpus) == GPU.objects.filter(node__name="h100-node-1").count() == 8
    assert all(g["utilization_pct"] is not None and g["power_w"] is not None for g in gpus)
    gpu_lines = otto.ok("get", "gpus", "--node", "h100-node-1").splitlines()[1:]
    first = min(gpus, key=lambda g: g["index"])
    assert f"{first['utilization_pct']:.1f}%" in gpu_lines[0] and f"{first['power_w']:.0f} W" in gpu_lines[0]

    # Deploy, then explain: the chosen node and why, why not the others.
    deployed = json.loads(otto.ok("deploy", "chat", "--model", "llama-3-8b", "--memory-gb", "8", "--sharing", "mps",
                                  "--share-percent", "25", "-n", "team-a", "-o", "json"))
    row = Deployment.objects.get(pk=deployed["id"])
    assert (row.name, row.namespace, row.created_by, deployed["status"]) == ("chat", "team-a", operator, "placed")
    node = deployed["placements"][0]["node"]
    assert re.search(rf"^team-a\s+chat\s+{row.pk}\s+placed\s+0/1\s", otto.ok("get", "deployments"), re.M)
    explained = otto.ok("explain", "chat")
    decision = json.loads(otto.ok("explain", "chat", "-o", "json"))["decisions"][0]
    matrix = decision["matrix"]
    chosen = next(r for r in matrix["rows"] if r["node"] == node)
    assert decision["node"] == node and f"Replica 0: placed on {node}" in explained
    assert re.search(rf"^\s+1\s+{node}\s.*\schosen\s+{chosen['total']:.1f}\s", explained, re.M)
    for plugin in matrix["weights"]:
        assert re.search(rf"^\s+{plugin}\s+{matrix['weights'][plugin]:.2f}\s", explained, re.M), plugin
    runner_up = next(r for r in matrix["rows"] if r["feasible"] and r["node"] != node)
    gap = chosen["total"] - runner_up["total"]
    assert f"{runner_up['node']}: {gap:.1f} points below {node}" in explained.split("Why not the others:")[1]

    # A rollout with progress: preview, create, start, pause/resume, then watch it to the end.
    time.sleep(2.2)  # the server's simulator makes a pod ready 2 s after binding
    tick(demo)
    assert set(Deployment.objects.values_list("status", flat=True)) == {DeploymentStatus.RUNNING}
    config = ("--nodes", ",".join(TARGETS), "--mode", "mps", "--replicas", "4")
    preview = otto.ok("rollout", "preview", *config)
    assert re.search(r"^Verdict:\s+safe to create$", preview, re.M) and re.search(r"^BATCH\s+NODES\s+CAPACITY-DIP", preview, re.M)
    created = json.loads(otto.ok("rollout", "create", "mps-r4", *config, "-o", "json"))
    assert created["status"] == "pending" and {n["node"] for n in created["nodes"]} == set(TARGETS)
    assert otto.ok("rollout", "start", "mps-r4").strip() == "rollout/mps-r4 started (now running)"
    assert otto.ok("rollout", "pause", "mps-r4").strip() == "rollout/mps-r4 paused (now paused)"
    assert re.search(r"^Status:\s+paused$", otto.ok("rollout", "status", "mps-r4"), re.M)
    otto.ok("rollout", "resume", "mps-r4")
    watcher = otto.start("rollout", "status", "mps-r4", "--watch", "--interval", "0.1")
    rollout = RollingUpdate.objects.get(pk=created["id"])
    for _ in range(400):
        tick(demo)
        rollout.refresh_from_db()
        if rollout.status != "running":
            break
        time.sleep(0.05)
    stdout, stderr = watcher.communicate(timeout=30)
    assert rollout.status == "succeeded", rollout.message
    assert watcher.returncode == 0, stderr
    progress = [float(m.group(1)) for m in map(BAR.search, stdout.splitlines()) if m]
    assert progress[0] < 50.0 and 50.0 in progress and progress[-1] == 100.0
    assert progress == sorted(progress)  # it only moves forward, one line per change
    assert stdout.rstrip().endswith('rollout "mps-r4" successfully rolled out')
    # Abort: a pending rollout aborted ends; watching it says how, with exit 1.
    otto.ok("rollout", "create", "r2", "--nodes", "h100-node-4", "--mode", "timeslice", "--replicas", "2")
    assert otto.ok("rollout", "abort", "r2").startswith("rollout/r2 aborted (now ")
    ended = RollingUpdate.objects.get(name="r2").status
    watched = otto.run("rollout", "status", "r2", "--watch")
    assert watched.returncode == 1 and watched.stderr.startswith(f'error: rollout "r2" {ended}: ')
    assert re.search(rf"^Status:\s+{ended}$", watched.stdout, re.M)

    # A consolidation plan: run and approved by an admin only.
    assert otto.fails("plans", "create") == \
        "Error from server (Forbidden): plans is forbidden: Your role does not allow this.\n"
    plan_id = int(re.match(r"plan/(\d+) created \(proposed\)", ada.ok("plans", "create")).group(1))
    again = ada.ok("plans", "create")  # the same moves: no new plan, the proposed one refreshed
    assert again.rstrip().endswith(f"(plan/{plan_id}, proposed)")
    listed = json.loads(otto.ok("plans", "list", "-o", "json"))["items"]
    assert [p["id"] for p in listed] == [plan_id] and listed[0]["moves"]
    assert otto.fails("plans", "approve", str(plan_id)) == \
        f'Error from server (Forbidden): plans "{plan_id}" is forbidden: Your role does not allow this.\n'
    assert ada.ok("plans", "approve", str(plan_id)).strip() == f"plan/{plan_id} approved"
    assert ConsolidationPlan.objects.get(pk=plan_id).status == "approved"

    # Savings, as the server figures them.
    server = APIClient()
    server.force_authenticate(viewer)
    figures = server.get("/api/v1/savings/").json()
    assert json.loads(vera.ok("savings", "-o", "json")) == figures
    assert re.search(rf"^GPUs:\s+{figures['gpus_used']} used of {figures['baseline_gpus']} on the baseline: "
                     rf"{figures['gpus_saved']} saved", vera.ok("savings"), re.M)

    # kubectl's messages and exit codes for a role too low, a missing object, a wrong command.
    assert vera.fails("deploy", "x", "--model", "m", "--memory-gb", "4") == \
        'Error from server (Forbidden): deployments "x" is forbidden: Your role does not allow this.\n'
    assert not Deployment.objects.filter(name="x").exists()
    assert vera.fails("explain", "nope") == 'Error from server (NotFound): deployments "nope" not found\n'
    assert vera.fails("gett", "nodes").startswith('error: unknown command "gett" for "gpuplane"\n\nDid you mean this?\n\tget')

    assert otto.ok("delete", "deployment", "chat", "-n", "team-a").strip() == "deployment/chat deleted"
    assert Deployment.objects.get(pk=row.pk).status == DeploymentStatus.DELETED

    # Log out: the server revokes the token, it is gone from the file; the next command is refused.
    assert AuthToken.objects.filter(user=operator).count() == 1
    assert "the token is revoked" in otto.ok("logout")
    assert not AuthToken.objects.filter(user=operator).exists()
    assert not yaml.safe_load(otto.config.read_text()).get("token")
    assert otto.fails("get", "nodes").startswith("error: You must be logged in to the server (Unauthorized)")
