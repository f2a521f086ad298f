"""The local stack's processes: their ports lie outside the kernel's ephemeral
range (clients of a stopped process keep calling its port, and must not reach
a process that the kernel gave that port to: a Spark driver waiting for its
Python worker), and several stop at once."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from multikafka.coordinator import CoordinatorConfig, EtcdEndpoint
from multikafka.devstack import processes
from multikafka.devstack.processes import (
    CoordinatorThread,
    ManagedProcess,
    ephemeral_ports,
    free_port,
    stop_together,
)
from tests.helpers import eventually


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


def test_a_coordinator_asked_for_any_port_gets_a_free_port() -> None:
    etcd = EtcdEndpoint.parse("http://127.0.0.1:2379")
    thread = CoordinatorThread(CoordinatorConfig(etcd=etcd, listen="127.0.0.1:0"))
    thread.stop()  # never started: closes its loop
    host, _, port = thread.config.listen.rpartition(":")
    assert host == "127.0.0.1"
    assert 10_000 <= int(port) < ephemeral_ports()[0]
    given = CoordinatorThread(CoordinatorConfig(etcd=etcd, listen="127.0.0.1:7070"))
    given.stop()
    assert given.config.listen == "127.0.0.1:7070"


#: A child that, asked to exit, takes a while (as a tansu broker draining a
#: fetching client does): its lines say when it was asked and when it exits.
#: A child that, asked to stop, waits (up to 5 s) until all its siblings
#: were asked too: stopping one at a time would keep the first waiting out
#: its 5 s, and the others would be asked only after it exited. A second
#: SIGTERM (``stop`` asks again one still running) changes nothing.
_SLOW_EXIT = """
import os, signal, sys, time
asked_dir, siblings = sys.argv[1], int(sys.argv[2])
def bye(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("asked", time.monotonic(), flush=True)
    open(os.path.join(asked_dir, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 5
    while len(os.listdir(asked_dir)) < siblings and time.monotonic() < deadline:
        time.sleep(0.01)
    print("exits", time.monotonic(), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_processes_stopped_together_are_all_asked_before_any_is_waited_for(
    tmp_path: Path,
) -> None:
    asked = tmp_path / "asked"
    asked.mkdir()
    children = [
        ManagedProcess(f"slow{i}", [sys.executable, "-c", _SLOW_EXIT, str(asked), "3"], tmp_path)
        for i in range(3)
    ]
    for child in children:
        child.start()

    def lines(child: ManagedProcess) -> dict[str, float]:
        words = (w.split() for w in child.log_path.read_text().splitlines())
        return {w[0]: float(w[1]) if len(w) > 1 else 0.0 for w in words if w}

    eventually(lambda: all("ready" in lines(c) for c in children))
    stop_together(children)
    seen = [lines(c) for c in children]
    assert not any(c.alive() for c in children)
    # Every child was asked before the first one exited: no stop waited for another.
    assert max(s["asked"] for s in seen) < min(s["exits"] for s in seen), seen
