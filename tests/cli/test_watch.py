"""`rollout status --watch` (gpuplane_cli.commands.rollout): a line per change in a pipe, one line
redrawn on a terminal, kubectl's ending and exit status."""
from __future__ import annotations

import json
from io import StringIO

import pytest
import yaml

from gpuplane_cli.commands import rollout as rollout_command
from gpuplane_cli.context import Context
from gpuplane_cli.errors import CLIError
from gpuplane_cli.main import build_parser


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def state(status: str, percent: float, *node_states: str, message: str = "") -> dict:
    return {"id": 4, "name": "r", "status": status, "progress_percent": percent, "message": message,
            "config": {"mode": "mps", "replicas": 4}, "strategy": "rolling", "max_unavailable": 1, "on_failure": "pause",
            "nodes": [{"node": f"n{i}", "state": s, "batch_index": i, "reason": ""} for i, s in enumerate(node_states, 1)]}


def watch(monkeypatch, states: list[dict], out: StringIO, *flags: str) -> tuple[int | None, str, list[float]]:
    reads = iter(states[1:])
    slept: list[float] = []
    monkeypatch.setattr(rollout_command, "fetch_one", lambda client, kind, ref: states[0])
    args = build_parser().parse_args(["rollout", "status", "r", "--watch", "--interval", "0.5", *flags])
    ctx = Context(args=args, environ={}, out=out, err=StringIO(), sleep=slept.append)
    monkeypatch.setattr(ctx, "client", lambda **_: type("C", (), {"get": lambda self, path: next(reads)})())
    code = None
    try:
        code = rollout_command.run_status(ctx)
    except CLIError as error:
        return None, error.message, slept
    return code, out.getvalue(), slept


STEPS = [
    state("running", 0.0, "draining", "pending"),
    state("running", 0.0, "draining", "pending"),  # no change: no new line
    state("running", 50.0, "succeeded", "draining"),
    state("succeeded", 100.0, "succeeded", "succeeded"),
]


def test_in_a_pipe_it_prints_a_line_per_change_then_the_status_and_kubectls_ending(monkeypatch):
    code, text, slept = watch(monkeypatch, STEPS, StringIO())
    lines = text.splitlines()
    assert code == 0 and slept == [0.5, 0.5, 0.5]
    assert lines[:3] == [
        "running   [..............................]   0.0 %   n1 draining, n2 pending",
        "running   [###############...............]  50.0 %   n1 succeeded, n2 draining",
        "succeeded [##############################] 100.0 %   n1 succeeded, n2 succeeded",
    ]
    assert lines[-1] == 'rollout "r" successfully rolled out' and "Status:   succeeded" in text


def test_on_a_terminal_it_redraws_one_line(monkeypatch):
    code, text, _ = watch(monkeypatch, STEPS, Terminal())
    live = text.split("\nRollout:")[0]
    assert code == 0 and live.count("\r\x1b[K") == 3 and live.count("\n") == 0


def test_a_failed_rollout_exits_1_with_its_message(monkeypatch):
    code, message, _ = watch(monkeypatch, [STEPS[0], state("failed", 50.0, "succeeded", "failed", message="n2: drain timed out")],
                             StringIO())
    assert code is None and message == 'error: rollout "r" failed: n2: drain timed out'


def test_it_gives_up_after_the_timeout(monkeypatch):
    clock = iter([0.0, 0.0, 11.0])
    monkeypatch.setattr(rollout_command.time, "monotonic", lambda: next(clock))
    code, message, _ = watch(monkeypatch, STEPS, StringIO(), "--timeout", "10")
    assert code is None and message == "error: timed out waiting for the condition"


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_with_json_or_yaml_only_the_final_object_is_printed(monkeypatch, fmt):
    code, text, _ = watch(monkeypatch, STEPS, StringIO(), "-o", fmt)
    parsed = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    assert code == 0 and parsed["status"] == "succeeded"
