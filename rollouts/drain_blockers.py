"""Which pods a drain evicts, and which of them keep a node from being drained at all.

One rule for the preview (read before anything is touched) and the steps (checked again as
pre-warming starts and before any eviction): a drain evicts every pod on the node but DaemonSet
pods and mirror pods (static pods the kubelet runs from files, which the API cannot remove), as
``kubectl drain`` leaves them. Of those, a pod marked do-not-disrupt (annotation or label
``gpuplane.io/do-not-disrupt=true``: gpuplane never evicts it) or a bare pod (no controller
owner: an eviction would delete it for good, so ``kubectl drain`` refuses it without --force)
means the node is skipped, with the reason, and the rollout goes on without it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nodes.cluster.base import ClusterPod
from nodes.cluster.disruption import pod_do_not_disrupt

# Mirror pods (static pods the kubelet runs from files): owned by their Node, marked by this annotation.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MIRROR_OWNER_KIND = "Node"

DO_NOT_DISRUPT = "do-not-disrupt"
BARE = "bare"


@dataclass(frozen=True)
class DrainBlocker:
    """A pod that keeps its node from being drained; ``kind`` is ``do-not-disrupt`` or ``bare``."""

    pod: str  # "namespace/name"
    kind: str

    def as_dict(self) -> dict[str, str]:
        return {"pod": self.pod, "kind": self.kind}


def drained_pods(pods: Iterable[ClusterPod], node: str) -> list[ClusterPod]:
    """The pods on ``node`` a drain evicts (not DaemonSet pods, nor mirror pods)."""
    return [p for p in pods if p.node_name == node and p.owner_kind not in ("DaemonSet", MIRROR_OWNER_KIND)
            and MIRROR_ANNOTATION not in p.annotations]


def drain_blockers(pods: Iterable[ClusterPod]) -> list[DrainBlocker]:
    """The pods among ``pods`` (already ``drained_pods``) that block the drain, do-not-disrupt ones
    first, each group by key."""
    listed = list(pods)
    marked = sorted(p.key for p in listed if pod_do_not_disrupt(p))
    bare = sorted(p.key for p in listed if not p.owner_kind and p.key not in marked)
    return [DrainBlocker(key, DO_NOT_DISRUPT) for key in marked] + [DrainBlocker(key, BARE) for key in bare]


def skip_reason(blockers: list[DrainBlocker], outcome: str) -> str:
    """Why the node is skipped, the do-not-disrupt pods first (``outcome``: what that leaves of
    the node, e.g. "nothing on it was changed"); "" when nothing blocks it."""
    marked = [b.pod for b in blockers if b.kind == DO_NOT_DISRUPT]
    if marked:
        return (f"holds do-not-disrupt pod {', '.join(marked)}: gpuplane never evicts it, so the node is "
                f"skipped ({outcome})")
    bare = [b.pod for b in blockers if b.kind == BARE]
    if bare:
        return (f"holds pod {', '.join(bare)} with no controller: an eviction would delete it for good "
                f"(kubectl drain refuses it without --force), so the node is skipped ({outcome})")
    return ""
