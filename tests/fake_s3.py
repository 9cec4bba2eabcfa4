"""Small HTTP servers on 127.0.0.1 that behave like hostile or slow peer stores, for fetch tests.

- `FakeS3`: path-style anonymous S3 reads (HEAD/GET `/bucket/key`) of objects that appear at a
  chosen wall-clock time, with a Last-Modified the test chooses (a peer-run store can lie), an
  optional trickle rate for bodies and an optional redirect; it logs every request.
- `black_hole`: a port that accepts connections and never answers; it counts connections.
Every server runs on daemon threads and is shut down by its context manager.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FakeObject:
    data: bytes
    visible_at: float = 0.0  # wall clock from which HEAD/GET find it
    last_modified: float | None = None  # what the store claims (None: visible_at)
    etag: str = '"v1"'
    last_modified_header: str | None = None  # sent verbatim instead of `last_modified` (hostile stores)
    content_length_header: str | None = None  # sent in HEAD answers instead of the data's length
    trickle_bytes_per_s: float | None = None  # a body sent this slowly (after the headers)
    version: str | None = None  # sent as x-amz-version-id (a versioned bucket)


@dataclass
class FakeS3:
    """Objects by `/bucket/key` path; `redirect_to` answers everything with a 302 there."""

    objects: dict[str, FakeObject] = field(default_factory=dict)
    redirect_to: str | None = None
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, Host header)
    port: int = 0

    def put(self, path: str, obj: FakeObject) -> None:
        self.objects[path] = obj

    def requests(self, method: str) -> list[str]:
        return [path for m, path, _ in self.log if m == method]


def _handler(store: FakeS3) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            store.log.append((self.command, path, self.headers.get("Host", "")))
            if store.redirect_to is not None:
                self.send_response(302)
                self.send_header("Location", store.redirect_to + path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            obj = store.objects.get(path)
            if obj is None or time.time() < obj.visible_at:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            length = (
                obj.content_length_header if not body and obj.content_length_header else str(len(obj.data))
            )
            self.send_header("Content-Length", length)
            self.send_header("ETag", obj.etag)
            if obj.version is not None:
                self.send_header("x-amz-version-id", obj.version)
            stamp = obj.last_modified if obj.last_modified is not None else obj.visible_at
            self.send_header("Last-Modified", obj.last_modified_header or formatdate(stamp, usegmt=True))
            self.end_headers()
            if body:
                self._body(obj)

        def _body(self, obj: FakeObject) -> None:
            with suppress(OSError):
                if obj.trickle_bytes_per_s is None:
                    self.wfile.write(obj.data)
                    return
                for i in range(len(obj.data)):
                    self.wfile.write(obj.data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(1.0 / obj.trickle_bytes_per_s)

    return Handler


@contextmanager
def serving(store: FakeS3, tls: ssl.SSLContext | None = None) -> Iterator[FakeS3]:
    """Serve `store` on 127.0.0.1 (over TLS with `tls`, a server context)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(store))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    store.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield store
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class BlackHole:
    port: int
    connections: int = 0


@contextmanager
def black_hole() -> Iterator[BlackHole]:
    """Accepts every connection and never answers (nor closes) until the test ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    hole = BlackHole(int(listener.getsockname()[1]))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])
                hole.connections += 1

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield hole
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()
