"""The embedded broker cannot tear a message (gpuplane/broker.py; celery/kombu#1551).

kombu's filesystem transport creates a message file, then writes it; a consumer that lists the
folder in between reads an empty file and dies with JSONDecodeError (what killed `make run`'s
worker). These tests stop a writer at exactly that moment and let a consumer in.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kombu import Connection
from kombu.transport import filesystem

from gpuplane import broker


def channel(tmp_path: Path, transport: str):
    folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir(exist_ok=True)
    options = {"data_folder_in": str(folders["queue"]), "data_folder_out": str(folders["queue"]),
               "processed_folder": str(folders["processed"]), "control_folder": str(folders["control"])}
    return Connection("filesystem://localhost//", transport=transport, transport_options=options).channel()


def test_kombus_own_transport_hands_a_consumer_a_half_written_message(tmp_path, monkeypatch):
    """The upstream race, reproduced: the consumer reads the file between its creation and its write."""
    writer, reader = channel(tmp_path, "filesystem"), channel(tmp_path, "filesystem")
    seen: list[BaseException] = []
    real_lock = filesystem.lock

    def lock_then_let_a_consumer_in(file, flags):
        real_lock(file, flags)
        try:
            reader._get("celery")
        except BaseException as error:  # noqa: BLE001 - whatever the consumer meets is the finding
            seen.append(error)

    monkeypatch.setattr(filesystem, "lock", lock_then_let_a_consumer_in)
    writer._put("celery", {"body": "x"})

    assert len(seen) == 1 and isinstance(seen[0], json.JSONDecodeError)


def test_a_consumer_never_sees_a_message_before_it_is_whole(tmp_path, monkeypatch):
    writer, reader = channel(tmp_path, "gpuplane.broker:Transport"), channel(tmp_path, "gpuplane.broker:Transport")
    seen: list[object] = []
    real_replace = os.replace

    def consume_then_rename(source, destination):
        # The whole message is on disk under its temporary name; the queue shows nothing yet.
        assert Path(source).name.startswith(".") and Path(source).read_bytes()
        with pytest.raises(filesystem.Empty):
            reader._get("celery")
        seen.append(reader._size("celery"))
        real_replace(source, destination)

    monkeypatch.setattr(broker.os, "replace", consume_then_rename)
    writer._put("celery", {"body": "x" * 100_000})

    assert seen == [0]
    assert reader._get("celery") == {"body": "x" * 100_000}
    assert not any((tmp_path / "queue").iterdir()) and not any((tmp_path / "processed").iterdir())


def test_a_message_is_delivered_once_in_order_and_leaves_nothing_behind(tmp_path):
    writer, reader = channel(tmp_path, "gpuplane.broker:Transport"), channel(tmp_path, "gpuplane.broker:Transport")
    for n in range(5):
        writer._put("celery", {"n": n})
    writer._put("other", {"n": "other"})

    assert [reader._get("celery")["n"] for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(filesystem.Empty):
        reader._get("celery")
    assert reader._size("other") == 1


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    writer = channel(tmp_path, "gpuplane.broker:Transport")

    def refuse(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(broker.os, "replace", refuse)
    with pytest.raises(filesystem.ChannelError):
        writer._put("celery", {"body": "x"})
    assert list((tmp_path / "queue").iterdir()) == []
