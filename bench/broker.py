"""The embedded broker's torn messages, kombu's filesystem transport against gpuplane's (gpuplane/broker.py).

    python bench/broker.py --seconds 20 --writers 2 --rate 100 --payload-kb 256 --json

For each transport (`filesystem`: kombu's own; `gpuplane.broker:Transport`: whole-file writes and
renames), in a fresh folder: `--writers` processes each put `--rate` messages a second of
`--payload-kb` KiB (as beat and the web workers do, only more often, and larger so that a write
takes long enough to be met), and one consumer process takes them as they come (as the worker
does: the queue is mostly empty, so it takes the newest file) for `--seconds`. Reported per transport: messages sent and received per
second, the consumer's median and p99 seconds per message, and torn reads: messages the
consumer could not decode (kombu's JSONDecodeError, which kills a Celery worker) or found empty.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRANSPORTS = ("filesystem", "gpuplane.broker:Transport")


def _channel(folder: str, transport: str) -> Any:
    from kombu import Connection

    options = {"data_folder_in": f"{folder}/queue", "data_folder_out": f"{folder}/queue",
               "processed_folder": f"{folder}/processed", "control_folder": f"{folder}/control"}
    return Connection("filesystem://localhost//", transport=transport, transport_options=options).channel()


def _write(folder: str, transport: str, payload_kb: int, rate: float, until: float, sent: Any) -> None:
    channel = _channel(folder, transport)
    body = {"body": "x" * (payload_kb * 1024), "headers": {}}
    count = 0
    next_at = time.time()
    while time.time() < until:
        channel._put("celery", body)
        count += 1
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.time()))
    with sent.get_lock():
        sent.value += count


def _read(folder: str, transport: str, until: float, results: Any) -> None:
    from kombu.transport.filesystem import Empty

    channel = _channel(folder, transport)
    received = torn = 0
    durations: list[float] = []
    while time.time() < until + 1:
        started = time.perf_counter()
        try:
            message = channel._get("celery")
        except Empty:
            if time.time() >= until:
                break
            continue
        except ValueError:  # JSONDecodeError: a message read before it was written
            torn += 1
            continue
        durations.append(time.perf_counter() - started)
        received += 1
        if not message.get("body"):
            torn += 1
    results.put({"received": received, "torn": torn, "durations": durations})


def run(transport: str, seconds: float, writers: int, rate: float, payload_kb: int) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="gpuplane-broker-bench-")
    for sub in ("queue", "processed", "control"):
        os.makedirs(f"{folder}/{sub}")
    until = time.time() + seconds
    sent = mp.Value("i", 0)
    results: Any = mp.Queue()
    procs = [mp.Process(target=_write, args=(folder, transport, payload_kb, rate, until, sent)) for _ in range(writers)]
    procs.append(mp.Process(target=_read, args=(folder, transport, until, results)))
    for proc in procs:
        proc.start()
    outcome = results.get()
    for proc in procs:
        proc.join()
    durations = sorted(outcome["durations"]) or [0.0]
    return {
        "transport": transport, "seconds": seconds, "writers": writers, "rate_per_writer": rate, "payload_kb": payload_kb,
        "sent_per_s": round(sent.value / seconds, 1), "received_per_s": round(outcome["received"] / seconds, 1),
        "torn": outcome["torn"],
        "get_median_ms": round(statistics.median(durations) * 1000, 3),
        "get_p99_ms": round(durations[int(0.99 * (len(durations) - 1))] * 1000, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100, help="messages a second per writer")
    parser.add_argument("--payload-kb", type=int, default=256)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = [run(transport, args.seconds, args.writers, args.rate, args.payload_kb) for transport in TRANSPORTS]
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
