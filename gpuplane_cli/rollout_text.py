"""A rollout preview (`POST /api/v1/rollouts/preview/`, or a refused create's) as text: the verdict
and blockers, the batches with their capacity dip, every workload to move and where, and the
nodes skipped or blocking a drain."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplane_cli.output import key_values, number, table
from gpuplane_cli.resources import config_text


def _window(window: Mapping[str, Any] | None) -> str:
    if not window:
        return "none: each node's change may start any time"
    when = f"open now, closes {window.get('closes_at')}" if window.get("open_now") else \
        f"closed, next opens {window.get('next_opens_at')}"
    return f"{window.get('cron')} ({window.get('timezone')}) for {window.get('duration_minutes')} min: {when}"


def render_preview(preview: Mapping[str, Any]) -> str:
    """The preview in sections; empty sections are left out."""
    batches = preview.get("batches") or []
    nodes = sum(len(batch.get("nodes") or []) for batch in batches)
    configs = preview.get("configs") or {}
    parts = [key_values([
        ("Verdict", "safe to create" if preview.get("feasible") else "NOT safe now"),
        ("Config", f"{config_text(preview.get('config'))} on {nodes} node(s) in {len(batches)} batch(es), "
                   f"{preview.get('strategy')}, max unavailable {preview.get('max_unavailable')}"),
        ("Window", _window(preview.get("maintenance_window"))),
        ("Move back", "yes" if preview.get("move_back") else "no"),
        ("Placer", preview.get("placer")),
        # The device-plugin and mig-parted configs the change needs (a problem is also a blocker).
        *((title, ", ".join(configs[key])) for title, key in (("Configs present", "present"),
                                                               ("Configs to write", "to_write")) if configs.get(key)),
    ])]
    blockers = preview.get("blockers") or []
    if blockers:
        parts += ["", "Blockers:", *(f"  * {blocker}" for blocker in blockers)]
    if batches:
        rows = [(b.get("index"), ",".join(b.get("nodes") or []), number(b.get("capacity_dip_percent"), "%"),
                 len(b.get("moves") or [])) for b in batches]
        parts += ["", table(("batch", "nodes", "capacity-dip", "moves"), rows)]
    moves = [(b.get("index"), m) for b in batches for m in b.get("moves") or []]
    if moves:
        move_rows = [(index, m.get("workload"), m.get("source"), m.get("destination"), ",".join(map(str, m.get("gpus") or [])),
                 m.get("partition"), m.get("outcome"), m.get("reason")) for index, m in moves]
        parts += ["", "Moves:", table(("batch", "workload", "from", "to", "gpus", "gets", "outcome", "reason"), move_rows)]
    for title, items, fields in (
        ("Skipped", preview.get("skipped"), ("node", "reason")),
        ("Refused", preview.get("refusals"), ("workload", "node", "reason")),
        ("Drain blockers", preview.get("drain_blockers"), ("node", "reason")),
    ):
        if items:
            parts += ["", f"{title}:", *(f"  {': '.join(str(item.get(f)) for f in fields)}" for item in items)]
    if preview.get("pods_unread"):
        parts += ["", f"Pods not read: {preview['pods_unread']}"]
    explanation = preview.get("explanation") or []
    if explanation:
        parts += ["", "Explanation:", *(f"  {line}" for line in explanation)]
    return "\n".join(parts)
