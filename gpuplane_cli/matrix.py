"""`gpuplane explain`: a stored decision matrix (`GET /api/v1/deployments/{id}/decision/`, the
placement core's ``ScheduleResult.to_dict()``) in a terminal. For each replica: the outcome and
the rule that sized it, every kept node with its verdict and total, each score plugin's points
per node (heaviest weight first, as on the deployment page), then why not the others: how far
each feasible node fell behind and on which plugins, each rejected node's reason, and the nodes
the matrix did not keep, counted per reason."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplane_cli.output import NONE, key_values, table

Item = Mapping[str, Any]
REASONS_BEHIND = 2  # plugins named in a "why not" line


def by_weight(weights: Mapping[str, float]) -> list[tuple[str, float]]:
    """(plugin, weight), heaviest first, ties by name: the deployment page's column order."""
    return sorted(((str(p), float(w)) for p, w in weights.items()), key=lambda item: (-item[1], item[0]))


def _facts(row: Item) -> tuple[str, str]:
    facts = row.get("facts") or {}
    mode, replicas = facts.get("sharing_mode") or "", facts.get("replicas")
    sharing = f"{mode} x{replicas}" if mode and replicas and int(replicas) > 1 else mode
    return str(facts.get("gpu_model") or ""), str(sharing)


def _scores(row: Item) -> dict[str, Item]:
    return {str(s["plugin"]): s for s in row.get("scores") or []}


def chosen_node(matrix: Item) -> str | None:
    """The node the replica went to; None unless the outcome is "placed"."""
    return matrix.get("node") if matrix.get("outcome") == "placed" else None


def verdict(row: Item, chosen: str | None) -> str:
    if not row.get("feasible"):
        return "rejected"
    return "chosen" if row.get("node") == chosen else "feasible"


def score_columns(matrix: Item, top: int) -> list[Item]:
    """The feasible rows whose scores get a column: the chosen node first, then by rank; at most ``top``."""
    chosen = chosen_node(matrix)
    feasible = [row for row in matrix.get("rows") or [] if row.get("feasible")]
    feasible.sort(key=lambda row: (row.get("node") != chosen, row.get("rank") or 10**9, str(row.get("node"))))
    return feasible[:max(top, 1)]


def nodes_table(matrix: Item) -> str:
    """Every kept node: rank, GPU model, sharing, verdict, total, and a rejected node's reason."""
    chosen = chosen_node(matrix)
    rows = []
    for row in matrix.get("rows") or []:
        model, sharing = _facts(row)
        why = " - ".join(part for part in (row.get("reason"), row.get("detail")) if part)
        total = row.get("total")
        rows.append((row.get("rank") or "-", row.get("node"), model, sharing, verdict(row, chosen),
                     "-" if total is None or not row.get("feasible") else f"{float(total):.1f}", why))
    return table(("rank", "node", "gpu-model", "sharing", "verdict", "total", "reason"), rows)


def scores_table(matrix: Item, top: int, *, wide: bool = False) -> str:
    """Plugins down, nodes across: each cell the plugin's weighted points (with ``wide``, also its
    normalized score and raw value); a TOTAL line at the bottom."""
    columns = score_columns(matrix, top)
    weights = by_weight(matrix.get("weights") or {})
    rows: list[list[object]] = []
    for plugin, weight in weights:
        line: list[object] = [plugin, f"{weight:.2f}"]
        for row in columns:
            score = _scores(row).get(plugin)
            if score is None:
                line.append("-")
            elif wide:
                line.append(f"{float(score['weighted']):.1f} ({score['normalized']}/100, raw {score['raw']})")
            else:
                line.append(f"{float(score['weighted']):.1f}")
        rows.append(line)
    rows.append(["TOTAL", "-", *(f"{float(row.get('total') or 0):.1f}" for row in columns)])
    names = [str(row.get("node")) for row in columns]
    return table(("plugin", "weight", *names), rows, keep_case=names)


def behind(chosen: Item, other: Item) -> str:
    """Why ``other`` lost to ``chosen``: the points between their totals and the plugins that made them."""
    gap = float(chosen.get("total") or 0) - float(other.get("total") or 0)
    ours, theirs = _scores(chosen), _scores(other)
    deficits = sorted(((float(ours[p]["weighted"]) - float(theirs[p]["weighted"]), p)
                       for p in ours if p in theirs), key=lambda item: (-item[0], item[1]))
    named = [f"{plugin} -{points:.1f}" for points, plugin in deficits if points > 0.05][:REASONS_BEHIND]
    if gap < 0.05:
        return f"tied with {chosen.get('node')} at {float(chosen.get('total') or 0):.1f} points; ranked after it"
    text = f"{gap:.1f} points below {chosen.get('node')}"
    return f"{text} ({', '.join(named)})" if named else text


def _counted(pairs: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{reason} ({count})" for reason, count in pairs)


def why_not(matrix: Item) -> list[str]:
    """One line per node that did not get the replica, then the nodes the matrix did not keep."""
    rows = list(matrix.get("rows") or [])
    chosen_name = chosen_node(matrix)
    chosen = next((row for row in rows if row.get("node") == chosen_name), None)
    lines = []
    for row in sorted((r for r in rows if r.get("feasible") and r is not chosen),
                      key=lambda r: (r.get("rank") or 10**9, str(r.get("node")))):
        reason = behind(chosen, row) if chosen else f"feasible, scored {float(row.get('total') or 0):.1f}"
        lines.append(f"{row.get('node')}: {reason}")
    for row in rows:
        if not row.get("feasible"):
            detail = f" ({row['detail']})" if row.get("detail") else ""
            lines.append(f"{row.get('node')}: rejected, {row.get('reason') or 'no reason given'}{detail}")
    rejected = (matrix.get("diagnosis") or {}).get("rejected") or {}
    shown = Counter(str(row.get("reason")) for row in rows if not row.get("feasible"))
    hidden = sorted(((str(r), int(c) - shown[str(r)]) for r, c in rejected.items() if int(c) > shown[str(r)]),
                    key=lambda item: (-item[1], item[0]))
    if hidden:
        count = sum(c for _, c in hidden)
        lines.append(f"{count} more node{'s' if count != 1 else ''} rejected: {_counted(hidden)}")
    kept_feasible = sum(1 for row in rows if row.get("feasible"))
    more = int(matrix.get("feasible_nodes") or 0) - kept_feasible
    if more > 0:
        lines.append(f"{more} more feasible node{'s' if more != 1 else ''} scored lower (not kept)")
    return lines


def render_decision(decision: Item, *, top: int = 5, wide: bool = False) -> str:
    """One replica's decision as text (see the module docstring)."""
    matrix = decision.get("matrix") or {}
    diagnosis = matrix.get("diagnosis") or {}
    outcome = decision.get("outcome") or matrix.get("outcome")
    head = f"Replica {decision.get('replica_index')}: {outcome}"
    if chosen_node(matrix):
        head += f" on {matrix['node']}"
    duration = decision.get("duration_ms")
    summary = key_values([
        ("Message", decision.get("message") or matrix.get("message")),
        ("Classified", (matrix.get("classification") or {}).get("reason")),
        ("Sizing", matrix.get("sizing")),
        ("Profile", decision.get("profile") or matrix.get("profile")),
        ("Nodes", f"{diagnosis.get('available', 0)} of {diagnosis.get('total_nodes', 0)} available"),
        ("Decided", f"{decision.get('created_at') or NONE}"
                    + (f" in {float(duration):.1f} ms" if duration is not None else "")),
    ])
    parts = [head, _indent(summary)]
    if matrix.get("rows"):
        parts += ["", "Nodes:", _indent(nodes_table(matrix))]
    if any(row.get("feasible") for row in matrix.get("rows") or []) and matrix.get("weights"):
        kept = sum(1 for row in matrix.get("rows") or [] if row.get("feasible"))
        note = f"; the top {top} of {kept} feasible nodes (--top N for more)" if kept > top else ""
        parts += ["", f"Scores: each plugin's weighted points (normalized 0-100 x weight){note}:",
                  _indent(scores_table(matrix, top, wide=wide))]
    others = why_not(matrix)
    if others:
        parts += ["", "Why not the others:" if chosen_node(matrix) else "Why not placed:",
                  *(f"  {line}" for line in others)]
    suggestion = (matrix.get("explanation") or {}).get("suggestion")
    if isinstance(suggestion, Mapping) and suggestion.get("text"):
        parts += ["", f"Suggestion: {suggestion['text']}"]
    return "\n".join(parts)


def render_decisions(deployment: Item, answer: Item, *, top: int = 5, wide: bool = False,
                     replica: int | None = None) -> str:
    """Every replica's decision of a deployment (or only ``replica``), after a header line."""
    header = (f"Deployment {deployment.get('namespace')}/{deployment.get('name')} (id {deployment.get('id')}): "
              f"{answer.get('status') or deployment.get('status')}")
    decisions = [d for d in answer.get("decisions") or [] if replica is None or d.get("replica_index") == replica]
    if not decisions:
        return header + "\nNo decision stored" + (f" for replica {replica}" if replica is not None else "") + "."
    return "\n\n".join([header, *(render_decision(d, top=top, wide=wide) for d in decisions)])


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line if line else line for line in text.splitlines())
