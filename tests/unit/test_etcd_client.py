"""The etcd client's choice of member (no etcd needed: clients connect lazily)."""

from __future__ import annotations

from coordinator.config import etcd_from
from coordinator.etcd import Etcd


async def test_two_calls_failing_on_one_member_move_on_once() -> None:
    """The watch and a call both see member A go: the client moves to B once,
    not to C (or, with two members, back to A)."""
    etcd = Etcd(etcd_from("http://a:2379,http://b:2379,http://c:2379"))
    on_a = etcd._client
    await etcd._move(ConnectionError("a down"), on_a)
    await etcd._move(ConnectionError("a down"), on_a)
    assert etcd.endpoint.host == "b"
    await etcd._move(ConnectionError("b down"), etcd._client)
    assert etcd.endpoint.host == "c"
    await etcd.close()
