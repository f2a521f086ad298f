"""The coordinator's HTTP listener: Prometheus metrics and probes, in plain
HTTP so that Kubernetes' probes work even when gRPC speaks TLS.

* ``GET /metrics``: Prometheus text.
* ``GET /healthz``: 200 while the process serves HTTP (liveness).
* ``GET /readyz``: 200 when this replica can serve (etcd reachable and a
  warm copy of the metadata; a leader is not required, so during a takeover
  a Service keeps endpoints that answer "retry"), else 503. It is not "is
  the leader": a leader-only readiness would keep standbys NotReady for good
  and a rolling update would never finish; standbys send clients to the
  leader themselves.
* ``GET /leader``: 200 on the leader only.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class Probed(Protocol):
    """What the probes read of the coordinator (simple attributes: this runs
    on the listener's threads)."""

    @property
    def can_serve(self) -> bool: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_address(self) -> str: ...


class ProbeServer:
    """Serves the endpoints above on ``host:port`` from a daemon thread."""

    def __init__(self, listen: str, replica: Probed, registry: CollectorRegistry) -> None:
        host, _, port = listen.rpartition(":")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(200, b"ok\n")
                elif path == "/readyz":
                    ok = replica.can_serve
                    self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
                elif path == "/leader":
                    leading = replica.is_leader
                    body = (
                        b"leader\n"
                        if leading
                        else f"standby; leader: {replica.leader_address or 'none'}\n".encode()
                    )
                    self._send(200 if leading else 503, body)
                else:
                    self._send(404, b"not found: /metrics, /healthz, /readyz, /leader\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds would flood the log

        self._server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="multikafka-http", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
