"""The one reader of ``/proc`` (``multikafka.devstack.procfs``) on this very
process: what it says agrees with what Python says."""

from __future__ import annotations

import os
import threading

from multikafka.devstack import procfs


def test_usage_of_this_process() -> None:
    usage = procfs.usage()
    assert usage["os_threads"] >= threading.active_count()
    assert usage["fds"] >= 3
    assert usage["rss_mib"] > 1
    assert usage["cpu_s"] >= 0
    assert procfs.memory_mib(field="VmHWM") >= usage["rss_mib"] - 1
    assert threading.get_native_id() in procfs.thread_cpu_s()


def test_the_process_tree() -> None:
    table = procfs.processes()
    me = table[os.getpid()]
    assert me.ppid == os.getppid()
    assert "python" in me.cmdline or "pytest" in me.cmdline
    assert os.getpid() in procfs.descendants(os.getppid(), table)
    assert procfs.state(os.getpid()) in ("R", "S")


def test_the_machine() -> None:
    low_high = procfs.local_port_range()
    assert low_high is None or low_high[0] < low_high[1]
    assert procfs.memory_gib() > 0
