"""Fixtures of the nodes tests: who holds partitions (nodes.holds), replaced for one test."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodes.holds import register_holder
from tests.nodes.fake_holder import FakeHolder


@pytest.fixture
def no_holder() -> Iterator[None]:
    """No holder registered: nothing is held."""
    previous = register_holder(None)
    yield
    register_holder(previous)


@pytest.fixture
def holder() -> Iterator[FakeHolder]:
    """A FakeHolder registered in place of the scheduler's holder."""
    fake = FakeHolder()
    previous = register_holder(fake)
    yield fake
    register_holder(previous)
