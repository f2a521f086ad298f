"""The local stack's ports lie outside the kernel's ephemeral range: clients of
a stopped process keep calling its port, and must not reach a process that the
kernel gave that port to (a Spark driver waiting for its Python worker)."""

from __future__ import annotations

import socket

import pytest

from multikafka.devstack import processes
from multikafka.devstack.processes import ephemeral_ports, free_port


def test_free_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    low, high = ephemeral_ports()
    assert 1024 <= low < high
    for _ in range(50):
        port = free_port()
        assert 10_000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        used = taken.getsockname()[1]
        draws = iter([used, used])
        randrange = processes.random.randrange
        monkeypatch.setattr(
            processes.random, "randrange", lambda a, b: next(draws, None) or randrange(a, b)
        )
        port = free_port()
        assert next(draws, None) is None  # both draws of the taken port were made
        assert port != used


def test_a_kernel_that_hands_out_every_port_gets_one_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "ephemeral_ports", lambda: (1024, 65535))
    monkeypatch.setattr(processes.random, "randrange", lambda a, b: pytest.fail("not asked"))
    port = free_port()
    assert 1024 <= port <= 65535
