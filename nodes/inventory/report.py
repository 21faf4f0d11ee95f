"""SyncReport: what one inventory sync wrote, and what it could not make sense of."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COUNTED_MODELS = ("nodes", "gpus", "partitions")
# Django's delete() counts rows per "app_label.Model"; the report counts them per COUNTED_MODELS key.
_DELETED_LABELS = {"nodes.Node": "nodes", "nodes.GPU": "gpus", "nodes.Partition": "partitions"}


def _zero_counts() -> dict[str, int]:
    return dict.fromkeys(COUNTED_MODELS, 0)


@dataclass
class SyncReport:
    """What one sync wrote. Counts are rows per model ("nodes", "gpus", "partitions")."""

    created: dict[str, int] = field(default_factory=_zero_counts)
    updated: dict[str, int] = field(default_factory=_zero_counts)
    deleted: dict[str, int] = field(default_factory=_zero_counts)
    # Nodes read and found unchanged (nothing written for them).
    heartbeats: int = 0
    mode: str = "list"  # how the cluster was read: "list" (no watch), "relist" or "watch"
    events: int = 0  # watch events read (nodes and pods)
    unknown_products: list[str] = field(default_factory=list)
    # "namespace/name" of pods holding GPUs that no partition could be found for.
    unplaced_pods: list[str] = field(default_factory=list)
    # Nodes gone from the cluster but kept (a holder still refers to them), now ready=False.
    gone_nodes_kept: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the sync created, updated or deleted any inventory row (heartbeats aside)."""
        return any(sum(counts.values()) for counts in (self.created, self.updated, self.deleted))

    def count_deleted(self, per_model: dict[str, int]) -> None:
        """Add the per-model counts of a Django `delete()` (cascades included) to `deleted`."""
        for label, count in per_model.items():
            key = _DELETED_LABELS.get(label)
            if key:
                self.deleted[key] += count

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serializable copy (what the Celery task returns)."""
        return {
            "created": dict(self.created),
            "updated": dict(self.updated),
            "deleted": dict(self.deleted),
            "heartbeats": self.heartbeats,
            "mode": self.mode,
            "events": self.events,
            "unknown_products": list(self.unknown_products),
            "unplaced_pods": list(self.unplaced_pods),
            "gone_nodes_kept": list(self.gone_nodes_kept),
            "changed": self.changed,
        }
