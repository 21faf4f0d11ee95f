"""What the suite may leave behind: nothing, in any broker or Redis database it did not create.

`snapshot` records, at session start, every Redis key (with its size) in databases 0..15 of
REDIS_URL's server and every file of the embedded brokers under the developer's var/ folders;
`leaks` compares a later snapshot with it. A new key, a list (a Celery queue) or set that grew,
or a new message file is a leak: some test enqueued into a broker that is not its own.

A worker of a running `make run` on the same Redis or var/ can show up here too, so the check
is meant for CI and for runs with nothing else on those brokers.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REDIS_DATABASES = range(16)
# Where kombu's filesystem transport keeps messages (queue) and fanout messages (control).
BROKER_FOLDERS = ("queue", "control")


@dataclass
class Snapshot:
    redis: dict[int, dict[bytes, int]] = field(default_factory=dict)  # db -> key -> size
    broker_files: set[str] = field(default_factory=set)


def redis_url_for_db(url: str, db: int) -> str:
    return urlsplit(url)._replace(path=f"/{db}").geturl()


def _size(client, key: bytes) -> int:
    kind = client.type(key)
    sizes = {b"list": client.llen, b"set": client.scard, b"zset": client.zcard, b"hash": client.hlen,
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


def broker_files(var_dirs: Iterable[Path]) -> set[str]:
    files: set[str] = set()
    for var_dir in var_dirs:
        for folder in BROKER_FOLDERS:
            root = var_dir / "celery-broker" / folder
            if root.is_dir():
                files.update(str(path) for path in root.rglob("*") if path.is_file())
    return files


def snapshot(redis_url: str, var_dirs: Iterable[Path]) -> Snapshot:
    return Snapshot(redis=redis_keys(redis_url) if redis_url else {}, broker_files=broker_files(var_dirs))


def leaks(before: Snapshot, after: Snapshot) -> list[str]:
    """One line per leaked key or message file, empty when the suite left nothing behind."""
    found: list[str] = []
    for db, keys in sorted(after.redis.items()):
        known = before.redis.get(db, {})
        for key, size in sorted(keys.items()):
            if key not in known:
                found.append(f"redis db {db}: new key {key!r} (size {size})")
            elif size > known[key]:
                found.append(f"redis db {db}: {key!r} grew from {known[key]} to {size}")
    found.extend(f"embedded broker: new message file {path}" for path in sorted(after.broker_files - before.broker_files))
    return found
