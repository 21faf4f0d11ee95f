"""What the suite may leave behind: nothing, in any broker or Redis database it did not create.

`snapshot` records, at session start, every Redis key (with its size) in databases 0..15 of
REDIS_URL's server and every file of the embedded brokers under the developer's var/ folders;
`leaks` compares a later snapshot with it. A new key, a list (a Celery queue) or set that grew,
or a new message file is a leak: some test enqueued into a broker that is not its own.

A running `make run` in the same checkout (or on the same Redis) sends messages there too. Each
message its processes send carries the header `gpuplane_server` (the supervisor's pid,
gpuplane/celery.py); a message carrying the id of a supervisor that is still running is that
server's, not the suite's, and is not counted (`server_message`). So `make test` passes beside
`make run`. Keys other than messages (a running server's cache entries) are not attributed:
run the suite on a Redis database no server uses, as CI does.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuplane.celery import SERVER_HEADER
from gpuplane.supervisor import server_alive

REDIS_DATABASES = range(16)
# Where kombu's filesystem transport keeps messages (queue) and fanout messages (control).
BROKER_FOLDERS = ("queue", "control")


@dataclass
class Snapshot:
    redis: dict[int, dict[bytes, int]] = field(default_factory=dict)  # db -> key -> size (suite's own messages)
    broker_files: set[str] = field(default_factory=set)


def server_message(raw: bytes | str, alive: Callable[[str], bool] = server_alive) -> bool:
    """Whether a kombu message (JSON, as a broker file or a Redis list entry holds it) was sent by a
    `make run` server that is still running. Anything unreadable counts as the suite's."""
    try:
        message: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return False
    headers = message.get("headers") if isinstance(message, dict) else None
    marker = headers.get(SERVER_HEADER) if isinstance(headers, dict) else None
    return isinstance(marker, str) and alive(marker)


def _list_size(client, key: bytes) -> int:
    """A list's entries that are not a running server's messages (a Celery queue holds JSON messages)."""
    return sum(1 for entry in client.lrange(key, 0, -1) if not server_message(entry))


def redis_url_for_db(url: str, db: int) -> str:
    return urlsplit(url)._replace(path=f"/{db}").geturl()


def _size(client, key: bytes) -> int:
    kind = client.type(key)
    if kind == b"list":
        return _list_size(client, key)
    sizes = {b"set": client.scard, b"zset": client.zcard, b"hash": client.hlen,
             b"stream": client.xlen}
    return sizes[kind](key) if kind in sizes else 1


def redis_keys(url: str) -> dict[int, dict[bytes, int]]:
    """Every key of every database of the server at `url`, with its size (1 for a string)."""
    import redis

    found: dict[int, dict[bytes, int]] = {}
    for db in REDIS_DATABASES:
        client = redis.Redis.from_url(redis_url_for_db(url, db))
        try:
            found[db] = {key: _size(client, key) for key in client.scan_iter(count=1000)}
        except redis.ResponseError:  # a server configured with fewer databases
            break
        except redis.ConnectionError:  # no server: nothing can leak into it (its tests fail on their own)
            return {}
        finally:
            client.close()
    return found


def _file_is_server_message(path: Path) -> bool:
    try:
        return server_message(path.read_bytes())
    except OSError:  # consumed meanwhile: it was a message, and someone took it
        return True


def broker_files(var_dirs: Iterable[Path]) -> set[str]:
    """Message files (`*.msg`) of the embedded brokers, less a running server's; not half-written
    `.*.tmp` files, nor the exchange tables under control/ (bindings, not messages)."""
    files: set[str] = set()
    for var_dir in var_dirs:
        for folder in BROKER_FOLDERS:
            root = var_dir / "celery-broker" / folder
            if root.is_dir():
                files.update(str(path) for path in root.rglob("*")
                             if path.is_file() and path.name.endswith(".msg") and not path.name.startswith(".")
                             and not _file_is_server_message(path))
    return files


def snapshot(redis_url: str, var_dirs: Iterable[Path]) -> Snapshot:
    return Snapshot(redis=redis_keys(redis_url) if redis_url else {}, broker_files=broker_files(var_dirs))


def leaks(before: Snapshot, after: Snapshot) -> list[str]:
    """One line per leaked key or message file, empty when the suite left nothing behind."""
    found: list[str] = []
    for db, keys in sorted(after.redis.items()):
        known = before.redis.get(db, {})
        for key, size in sorted(keys.items()):
            if size == 0 and key not in known:
                continue  # a queue holding only a running server's messages
            if key not in known:
                found.append(f"redis db {db}: new key {key!r} (size {size})")
            elif size > known[key]:
                found.append(f"redis db {db}: {key!r} grew from {known[key]} to {size}")
    found.extend(f"embedded broker: new message file {path}" for path in sorted(after.broker_files - before.broker_files))
    return found
