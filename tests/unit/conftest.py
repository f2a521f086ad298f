"""Fixtures of the unit tests: the coordinator's parts over the fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes import Parts, coordinator_parts


@pytest.fixture
async def parts() -> AsyncIterator[Parts]:
    """The store and the leader's duties over a fake etcd and fake Kafka
    (a test module may override it to set the fakes up further)."""
    p = await coordinator_parts()
    yield p
    await p.close()
