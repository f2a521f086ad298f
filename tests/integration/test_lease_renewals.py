"""The lease keeper's blocking etcd client (:class:`LeaseRenewals`) on a
real etcd: it keeps a lease alive and reads the leader key's create
revision; a lease gone reads as expired; a member that does not answer
moves the next call to the next member. (TLS with a password:
``test_etcd_security``.)"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from multikafka.coordinator.config import etcd_from
from multikafka.coordinator.state.etcd import Etcd
from multikafka.coordinator.state.leases import LeaseRenewals
from multikafka.core.exceptions import UnavailableError
from multikafka.devstack import free_port
from tests.helpers import uid

INTERNALS = (
    "multikafka.coordinator.config",
    "multikafka.coordinator.state.etcd",
    "multikafka.coordinator.state.leases",
)


pytestmark = pytest.mark.integration

TIMEOUT_S = 2.0


@pytest.fixture
async def etcd(etcd_url: str) -> AsyncIterator[Etcd]:
    client = Etcd(etcd_from(etcd_url))
    await client.connect()
    try:
        yield client
    finally:
        await client.close()


async def test_renewals_keep_a_lease_and_read_the_key(etcd: Etcd, etcd_url: str) -> None:
    lease = await etcd.grant_lease(30)
    key = f"/{uid('renewals')}/leader"
    created, kv = await etcd.create_if_absent(key, b"me", lease)
    assert created
    assert kv is not None
    renewals = LeaseRenewals(etcd_from(etcd_url))
    try:
        assert 0 < renewals.keep_alive(lease, TIMEOUT_S) <= 30
        assert renewals.create_revision(key, TIMEOUT_S) == kv.create_revision
        assert renewals.create_revision(f"{key}-absent", TIMEOUT_S) is None
        await etcd.revoke_lease(lease)  # the key goes with it
        assert renewals.keep_alive(lease, TIMEOUT_S) <= 0
        assert renewals.create_revision(key, TIMEOUT_S) is None
    finally:
        renewals.close()


async def test_a_member_that_does_not_answer_moves_the_next_call_on(
    etcd: Etcd, etcd_url: str
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    lease = await etcd.grant_lease(30)
    renewals = LeaseRenewals(etcd_from(f"{closed},{etcd_url}"))
    try:
        with pytest.raises(UnavailableError, match=rf"^etcd at {re.escape(closed)}: UNAVAILABLE"):
            renewals.keep_alive(lease, TIMEOUT_S)
        assert str(renewals.endpoint) == etcd_url
        assert renewals.keep_alive(lease, TIMEOUT_S) > 0
    finally:
        renewals.close()
        await etcd.revoke_lease(lease)
