"""Fingerprints of the placement core's decisions on seeded fleets, to show a change decides the same.

    python bench/decision_digest.py            # the full set (a few minutes)
    python bench/decision_digest.py --quick    # smaller fleets, a prefix of the trace

Run it on two checkouts (say main and a branch that only makes the core faster) and compare the
printed JSON: each value is the SHA-256 (16 hex digits) of every decision's ``to_dict()`` in
turn, the whole matrix included (outcome, node, GPUs, every kept row's raw and normalized scores,
rejection counts and examples). The fleets are ``bench/placement.py``'s (every sharing mode, 55 %
occupied, its request mix; the oldest placements released as in that benchmark) and the Alibaba
trace replayed through the API's profiles (``bench/trace_profiles.py``, seed 42's order) when
``--pods`` names its list.

The digests are for comparing two versions on one machine: OpenBLAS picks its kernels by CPU, and
the fragmentation score's last bits (so, rarely, a rounding at .5) may differ between CPUs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench import trace_replay  # noqa: E402
from bench.placement import build_cluster, make_request  # noqa: E402
from bench.trace_profiles import ProfileReplayer, request_for, workload_args  # noqa: E402
from scheduler.core import scheduler_for  # noqa: E402

DEFAULT_PODS = Path(__file__).resolve().parent.parent.parent / "shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv"


def _digest(results) -> str:  # type: ignore[no-untyped-def]
    digest = hashlib.sha256()
    for result in results:
        digest.update(json.dumps(result.to_dict(), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def fleet_digest(nodes: int, decisions: int, profile: str, seed: int = 42, window: int = 200) -> str:
    """Decisions on ``bench/placement.py``'s fleet of ``nodes`` nodes, reserving as that benchmark does."""
    snapshot = build_cluster(nodes, seed)
    scheduler = scheduler_for(profile)
    rng = random.Random(seed + 1)
    live: deque = deque()

    def decide():  # type: ignore[no-untyped-def]
        for number in range(decisions):
            result = scheduler.schedule(make_request(rng, number), snapshot)
            yield result
            if result.assignment is not None:
                live.append(result.assignment)
                if len(live) > window:
                    snapshot.unreserve(live.popleft())

    return _digest(decide())


def trace_digest(pods_path: Path, profile: str, pods: int, seed: int = 42) -> str:
    """The first ``pods`` decisions of the trace replay (seed ``seed``) through ``profile``."""
    nodes = trace_replay.load_nodes(pods_path.parent / trace_replay.NODE_LIST)
    listed = trace_replay.load_pods(pods_path)
    rng = np.random.default_rng(seed)
    shuffled = [nodes[i] for i in rng.permutation(len(nodes))]
    replayer = ProfileReplayer(profile, shuffled, workload_args(listed))
    offered = trace_replay.workload(listed, sum(n.gpu_count for n in shuffled) * 1000, rng)
    return _digest(replayer.scheduler.schedule(request_for(pod, number), replayer.snapshot)
                   for number, pod in enumerate(offered[:pods]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller fleets and a shorter trace prefix")
    parser.add_argument("--pods", type=Path, default=DEFAULT_PODS, help="the trace's pod list (skipped if absent)")
    args = parser.parse_args(argv)
    out: dict[str, str] = {}
    for profile in ("balanced", "packing"):
        out[f"fleet300-{profile}"] = fleet_digest(300, 1500, profile)
        if not args.quick:
            out[f"fleet2000-{profile}"] = fleet_digest(2000, 600, profile, seed=7)
        if args.pods.exists():
            out[f"trace-{profile}"] = trace_digest(args.pods, profile, 3000 if args.quick else 9000)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
