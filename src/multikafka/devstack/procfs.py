"""What Linux's ``/proc`` says about processes and the machine, in one place:
a process's CPU time, threads, file descriptors and memory, its state (a
process frozen by SIGSTOP), the process tree with command lines, and the
machine's CPU model, memory and ephemeral port range.

The dev stack, the tests and the benchmarks read ``/proc`` only through
here. (The reader agent's own start time, ``reader_agent._startup``, reads it
itself: the product may not import the dev stack.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Clock ticks per second of ``/proc/<pid>/stat``'s CPU fields.
TICKS = os.sysconf("SC_CLK_TCK")

Pid = int | str


def _stat(pid: Pid = "self") -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may
    hold spaces and parentheses): ``[0]`` is the state, ``[1]`` the parent
    pid, ``[11:15]`` utime, stime, cutime, cstime."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_s(pid: Pid = "self") -> float:
    """User + system CPU seconds of a process (its threads:
    :func:`thread_cpu_s`)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS


def state(pid: Pid) -> str:
    """The process's state letter (``R``, ``S``, ``T`` when stopped by SIGSTOP, ...)."""
    return _stat(pid)[0]


def threads(pid: Pid = "self") -> list[int]:
    """Ids of the process's OS threads."""
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def fds(pid: Pid = "self") -> int:
    """How many file descriptors the process holds open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def memory_mib(pid: Pid = "self", field: str = "VmRSS") -> float:
    """A memory figure of ``/proc/<pid>/status`` in MiB: ``VmRSS`` (resident
    now), ``VmHWM`` (the peak resident), ..."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def usage(pid: Pid = "self") -> dict[str, float]:
    """OS threads, open file descriptors, resident memory (MiB) and CPU
    seconds of a process."""
    return {
        "os_threads": len(threads(pid)),
        "fds": fds(pid),
        "rss_mib": memory_mib(pid),
        "cpu_s": cpu_s(pid),
    }


def thread_cpu_s(pid: Pid = "self") -> dict[int, float]:
    """Thread id -> seconds on CPU, of every thread of a process
    (``/proc/<pid>/task/<tid>/schedstat``: nanoseconds, finer than the
    10 ms ticks of ``stat``)."""
    out: dict[int, float] = {}
    for tid in threads(pid):
        try:
            on_cpu = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]
        except (OSError, IndexError):
            continue
        out[tid] = int(on_cpu) / 1e9
    return out


@dataclass(frozen=True)
class Process:
    """One process of :func:`processes`."""

    pid: int
    ppid: int
    #: CPU seconds, with those of its reaped children (a pyspark daemon
    #: reaps the workers it forks).
    cpu_s: float
    #: Its command line, arguments separated by spaces.
    cmdline: str


def processes() -> dict[int, Process]:
    """Every process of the machine that can be read, by pid."""
    table: dict[int, Process] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(entry)
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        used = sum(int(f) for f in fields[11:15]) / TICKS
        table[int(entry)] = Process(int(entry), int(fields[1]), used, cmd.strip())
    return table


def children(table: dict[int, Process]) -> dict[int, list[int]]:
    """Parent pid -> the pids of its children, in ``table``."""
    out: dict[int, list[int]] = {}
    for p in table.values():
        out.setdefault(p.ppid, []).append(p.pid)
    return out


def descendants(root: int, table: dict[int, Process]) -> list[int]:
    """``root`` and every process below it."""
    below = children(table)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(below.get(pid, []))
    return out


def local_port_range() -> tuple[int, int] | None:
    """The range the kernel picks ports from itself (a bind to port 0, the
    local end of an outgoing connection); None where unreadable."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``); empty where unreadable."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def memory_gib() -> float:
    """The machine's memory (``/proc/meminfo``'s MemTotal) in GiB; 0 where unreadable."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0
