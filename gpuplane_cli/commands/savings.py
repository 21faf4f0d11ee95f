"""`savings`: what sharing saves against whole GPUs, now and over the last 24 h (`GET /api/v1/savings/`)."""
from __future__ import annotations

import argparse
from typing import Any

from gpuplane_cli.context import Context
from gpuplane_cli.errors import APIError, Target, from_api_error
from gpuplane_cli.output import age, key_values, number, table


def register(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    savings = subparsers.add_parser("savings", parents=parents, help="GPUs, dollars and kWh saved by sharing")
    savings.set_defaults(handler=run_savings)


def _left_out(not_running: dict[str, Any] | None) -> list[tuple[str, object]]:
    """Replicas that should run and do not: the savings leave them out (and say so)."""
    if not not_running or not not_running.get("replicas"):
        return []
    names = ", ".join(f"{d.get('workload')} ({d.get('missing')})" for d in not_running.get("deployments") or [])
    return [("Left out", f"{not_running['replicas']} replica(s) not running, {not_running.get('baseline_gpus')} "
                         f"GPU(s) of baseline: {names}")]


def render(s: dict[str, Any], now: Any) -> str:
    sampled = s.get("sampled_at")
    summary = key_values([
        ("Baseline", s.get("baseline")),
        ("GPUs", f"{s.get('gpus_used')} used of {s.get('baseline_gpus')} on the baseline: {s.get('gpus_saved')} saved "
                 f"({number(s.get('saved_percent'), ' %')})"),
        ("Allocated", f"{number(s.get('allocated_gpu_equivalents'), '', 2)} GPU-equivalents"),
        ("Saved per hour", f"${number(s.get('usd_per_hour'), '', 2)}, {number(s.get('kwh_per_hour'), ' kWh', 2)}"),
        ("Saved in 24 h", f"{number(s.get('gpu_hours_saved_24h'))} GPU-hours, ${number(s.get('usd_saved_24h'), '', 2)}, "
                          f"{number(s.get('kwh_saved_24h'), ' kWh', 2)}"),
        ("Sampled", f"{age(sampled, now)} ago (every {s.get('sample_interval_s')} s)" if sampled else "not yet"),
        *_left_out(s.get("not_running")),
    ])
    rows = [(m.get("gpu_model") or "<unknown>", m.get("baseline_gpus"), m.get("gpus_used"), m.get("gpus_saved"),
             number(m.get("usd_per_gpu_hour"), "", 2), number(m.get("usd_per_hour"), "", 2),
             number(m.get("kwh_per_hour"), "", 2)) for m in s.get("by_model") or []]
    if not rows:
        return summary
    by_model = table(("gpu-model", "baseline", "used", "saved", "usd/gpu-h", "usd/h", "kwh/h"), rows)
    return f"{summary}\n\n{by_model}"


def run_savings(ctx: Context) -> int:
    try:
        answer = ctx.client().get("savings/")
    except APIError as error:
        raise from_api_error(error, Target("savings")) from None
    if not ctx.emit_data(answer):
        ctx.print(render(answer, ctx.now()))
    return 0
