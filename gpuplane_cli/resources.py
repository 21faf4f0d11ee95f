"""The kinds `gpuplane get` knows: their names and aliases, where the API keeps them, how one is
found by name, and their table columns (plus `-o wide`'s). Read from the API's own field names
(`/api/schema/`)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuplane_cli.client import Client
from gpuplane_cli.errors import APIError, CLIError, Target, from_api_error
from gpuplane_cli.output import NONE, age, gb, number

Row = Sequence[object]
Item = Mapping[str, Any]


@dataclass(frozen=True)
class Kind:
    """One kind of object: ``plural`` names it in messages (``deployments "chat" not found``)."""

    plural: str
    singular: str
    aliases: tuple[str, ...]
    path: str
    headers: tuple[str, ...]
    row: Callable[[Item, datetime], Row]
    wide_headers: tuple[str, ...] = ()
    wide_row: Callable[[Item, datetime], Row] = field(default=lambda item, now: ())
    name_field: str = "name"
    find_by_name: bool = False  # a `?name=` filter, else the name is the URL's key

    def name_of(self, item: Item) -> str:
        return str(item.get(self.name_field, ""))


# ---- cells ---------------------------------------------------------------------------------------


def config_text(config: Mapping[str, Any] | None) -> str:
    """A sharing config in a few characters: ``mps x4``, ``mig 3g.40gb:2,1g.10gb:1``, ``exclusive``."""
    if not config:
        return NONE
    mode = str(config.get("mode") or "")
    if config.get("mig_layout"):
        return f"{mode} " + ",".join(f"{profile}:{count}" for profile, count in config["mig_layout"].items())
    if config.get("replicas"):
        return f"{mode} x{config['replicas']}"
    return mode


def placement_sharing(placement: Item) -> str:
    """``mps 25%``, ``mig 1g.10gb``, ``exclusive``, ``default-scheduler``."""
    sharing = str(placement.get("sharing") or "")
    if placement.get("mig_profile"):
        return f"{sharing} {placement['mig_profile']}"
    share = placement.get("share_percent")
    if sharing in ("exclusive", "default-scheduler") or share is None:
        return sharing
    return f"{sharing} {float(share):g}%"


def placement_where(placement: Item) -> str:
    """``a100-node-2 GPU 2`` (``GPUs 0,1`` for several), or the default scheduler's."""
    if not placement.get("node"):
        return "<default-scheduler>"
    gpus = placement.get("gpus") or []
    label = "GPU" if len(gpus) == 1 else "GPUs"
    return f"{placement['node']} {label} {','.join(str(g) for g in gpus)}" if gpus else str(placement["node"])


def _deployment_row(d: Item, now: datetime) -> Row:
    placements = [p for p in d.get("placements") or [] if p.get("status") != "released"]
    running = sum(1 for p in placements if p.get("status") == "running")
    nodes = sorted({str(p.get("node") or "<default-scheduler>") for p in placements})
    sharing = placement_sharing(placements[0]) if placements else d.get("sharing")
    return (d.get("namespace"), d.get("name"), d.get("id"), d.get("status"), f"{running}/{d.get('replicas')}",
            d.get("model"), number(d.get("memory_gb"), " GB"), d.get("gpu_count"), sharing, ",".join(nodes),
            age(d.get("created_at"), now))


def _deployment_wide(d: Item, now: datetime) -> Row:
    return (d.get("priority"), d.get("workload_type"), d.get("latency_slo_ms"), d.get("created_by"), d.get("message"))


def _node_status(n: Item) -> str:
    status = "Ready" if n.get("ready") else "NotReady"
    return status + (",SchedulingDisabled" if n.get("cordoned") else "")


def _node_row(n: Item, now: datetime) -> Row:
    sharing = config_text(n.get("applied_config")) if n.get("applied_config") else n.get("sharing_mode")
    return (n.get("name"), _node_status(n), n.get("gpu_model") or n.get("gpu_product"), n.get("gpu_count"),
            f"{n.get('gpus_allocated', 0)}/{n.get('gpu_count', 0)}", sharing, number(n.get("utilization_pct"), "%"))


def _node_wide(n: Item, now: datetime) -> Row:
    cpu = n.get("cpu_allocatable_milli")
    return (config_text(n.get("desired_config")), None if cpu is None else f"{cpu / 1000:g}",
            gb(n.get("memory_allocatable_mib"), 0), age(n.get("last_seen"), now))


def _gpu_row(g: Item, now: datetime) -> Row:
    used, total = g.get("memory_used_mib"), g.get("memory_mib")
    memory = f"{NONE if used is None else f'{used / 1024:.1f}'}/{gb(total)}"
    return (g.get("node"), g.get("index"), g.get("model"), number(g.get("utilization_pct"), "%"), memory,
            number(g.get("power_w"), " W", 0), number(g.get("temperature_c"), " C", 0),
            number((g.get("allocated_milli") or 0) / 10, "%", 0), age(g.get("sampled_at"), now))


def _gpu_wide(g: Item, now: datetime) -> Row:
    return (g.get("uuid"), "yes" if g.get("mig_enabled") else "no", gb(g.get("free_memory_mib")))


def _rollout_row(r: Item, now: datetime) -> Row:
    nodes = r.get("nodes") or []
    return (r.get("id"), r.get("name"), r.get("status"), number(r.get("progress_percent"), "%"), len(nodes),
            config_text(r.get("config")), r.get("strategy"), age(r.get("created_at"), now))


def _rollout_wide(r: Item, now: datetime) -> Row:
    return (r.get("max_unavailable"), r.get("on_failure"), r.get("created_by"), r.get("message"))


def _plan_row(p: Item, now: datetime) -> Row:
    savings = (p.get("savings_per_hour") or {}).get("usd")
    return (p.get("id"), p.get("status"), len(p.get("moves") or []), ",".join(p.get("nodes_freed") or []),
            p.get("gpus_freed"), number(savings, "", 2), p.get("created_by"), age(p.get("created_at"), now))


def _plan_wide(p: Item, now: datetime) -> Row:
    return (p.get("method"), p.get("decided_by"), p.get("expires_at"), p.get("reason"))


DEPLOYMENTS = Kind(
    "deployments", "deployment", ("deployment", "deploy", "deployments", "dep"), "deployments/",
    ("namespace", "name", "id", "status", "ready", "model", "memory", "gpus", "sharing", "node", "age"), _deployment_row,
    ("priority", "workload", "latency-slo-ms", "created-by", "message"), _deployment_wide, find_by_name=True)
NODES = Kind("nodes", "node", ("node", "nodes", "no"), "nodes/",
             ("name", "status", "gpu-model", "gpus", "allocated", "sharing", "util"), _node_row,
             ("desired", "cpu", "memory", "last-seen"), _node_wide)
GPUS = Kind("gpus", "gpu", ("gpu", "gpus"), "gpus/",
            ("node", "index", "model", "util", "memory-used", "power", "temp", "allocated", "sampled"), _gpu_row,
            ("uuid", "mig", "free-memory"), _gpu_wide, name_field="uuid")
ROLLOUTS = Kind("rollouts", "rollout", ("rollout", "rollouts", "ro"), "rollouts/",
                ("id", "name", "status", "progress", "nodes", "config", "strategy", "age"), _rollout_row,
                ("max-unavailable", "on-failure", "created-by", "message"), _rollout_wide, find_by_name=True)
PLANS = Kind("plans", "plan", ("plan", "plans", "consolidation", "consolidations"), "consolidations/",
             ("id", "status", "moves", "nodes-freed", "gpus-freed", "usd/h", "created-by", "age"), _plan_row,
             ("method", "decided-by", "expires", "reason"), _plan_wide, name_field="id")
KINDS = (DEPLOYMENTS, NODES, GPUS, ROLLOUTS, PLANS)


def kind_named(word: str) -> Kind:
    """The kind a user's word names (any alias, any case)."""
    for kind in KINDS:
        if word.lower() in kind.aliases:
            return kind
    known = ", ".join(kind.plural for kind in KINDS)
    raise CLIError(f'error: the server doesn\'t have a resource type "{word}"\nKnown types: {known}')


def fetch_one(client: Client, kind: Kind, ref: str, *, namespace: str | None = None) -> dict[str, Any]:
    """One object by its name (or id, for kinds stored by id): kubectl's NotFound when none.

    A deployment or rollout named by a number is read by id; by a name, through `?name=`: the
    newest one not deleted wins, and a name in several namespaces needs ``namespace``.
    """
    target = Target(kind.plural, ref)
    try:
        if not kind.find_by_name or ref.isdigit():
            return client.get(f"{kind.path}{ref}/")
        params: dict[str, str] = {"name": ref}
        if namespace and kind is DEPLOYMENTS:
            params["namespace"] = namespace
        found = list(client.pages(kind.path, params))
    except APIError as error:
        raise from_api_error(error, target) from None
    live = [item for item in found if item.get("status") != "deleted"] or found
    if not live:
        raise CLIError(f"Error from server (NotFound): {target} not found")
    namespaces = sorted({str(item.get("namespace")) for item in live if "namespace" in item})
    if len(namespaces) > 1:
        raise CLIError(f"error: {target} is ambiguous: it is in namespaces {', '.join(namespaces)}; "
                       "give -n NAMESPACE or the id")
    return live[0]  # the API lists newest first
