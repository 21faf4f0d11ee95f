"""What a rollout needs in the GPU operator's ConfigMaps, checked by the preview and written before
the first cordon (DESIGN.md section 5, step 2).

A rollout needs the target config, as each target node will select it (its device plugin config
and, on MIG-capable nodes, its mig-parted config), and each node's current config, which a
rollback switches it back to. ``check`` is the preview's question (there, or writable now: the
API server accepts a dry run of the write); ``publish`` writes what is missing when the rollout
starts, and again, idempotently, before each node's first cordon (the ConfigMaps may have been
edited since): a node whose config cannot be written is never touched.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lifecycle.audit import record
from nodes.cluster.base import ClusterBackend
from nodes.contract import LABEL_MIG_CAPABLE
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.operator_configs import ConfigReport, NeededConfigs, check_configs, needed_configs, write_configs
from nodes.sharing.node_config import NodeConfig
from rollouts.models import RollingUpdate

CONFIGS_WRITTEN = "rollingupdate.configs_written"


def _mig_capable(node: Node) -> bool:
    return str(node.labels.get(LABEL_MIG_CAPABLE, "")).lower() == "true"


def needed_for_nodes(nodes: Iterable[Node], target: NodeConfig) -> NeededConfigs:
    """The configs a change of ``nodes`` to ``target`` needs: the target's, and each node's current one (a rollback's)."""
    pairs: list[tuple[NodeConfig, bool]] = []
    for node in nodes:
        pairs += [(target, _mig_capable(node)), (applied_config(node), _mig_capable(node))]
    return needed_configs(pairs)


def needed_for_rollout(rollout: RollingUpdate) -> NeededConfigs:
    """What a stored rollout needs: its config and each node's previous one, on the nodes still in the inventory."""
    target = NodeConfig.of(rollout.config["mode"], rollout.config.get("replicas"), rollout.config.get("mig_layout"))
    pairs: list[tuple[NodeConfig, bool]] = []
    for step in rollout.nodes.select_related("node").order_by("node_name"):
        if step.node is None:
            continue
        mig_capable = _mig_capable(step.node)
        pairs.append((target, mig_capable))
        previous = step.previous_config
        if previous:
            pairs.append((NodeConfig.of(previous["mode"], previous.get("replicas"), previous.get("mig_layout")),
                          mig_capable))
    return needed_configs(pairs)


def check(nodes: Iterable[Node], target: NodeConfig, cluster: ClusterBackend) -> ConfigReport:
    """The preview's check: every config the change needs is in the ConfigMaps or can be written now."""
    return check_configs(cluster, needed_for_nodes(nodes, target))


def publish(rollout: RollingUpdate, cluster: ClusterBackend, *, actor: Any) -> list[str]:
    """Write what ``rollout`` needs and is missing (ClusterError when it cannot); the names written,
    recorded as an audit event when there are any."""
    written = write_configs(cluster, needed_for_rollout(rollout))
    if written:
        record(CONFIGS_WRITTEN, rollout, actor=actor,
               reason=f"wrote {', '.join(written)} into the GPU operator's ConfigMaps before touching any node",
               after={"written": written})
    return written
