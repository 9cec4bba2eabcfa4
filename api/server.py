"""The uvicorn server for the app, with limits a public endpoint needs.

uvicorn closes an idle keep-alive connection, but not one whose request never finishes: a client
that sends half a request line, or headers announcing a body it then trickles a byte at a time
(every byte restarts uvicorn's keep-alive timer, and nothing bounds a body), holds a connection and
a descriptor for good. The protocol here closes a connection whose request (headers and body) is not
complete `header_timeout_s` after the connection opened or after its previous response ended, and
accepts at most `max_connections_per_client` connections from one client (api/clients.py), so one
address cannot take every one of the server's `max_connections`.
"""

from __future__ import annotations

import asyncio
import logging
import time

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from api.clients import client_key
from api.settings import ApiConfig

RECEIVING = (h11.IDLE, h11.SEND_BODY)  # their states while a request is still on its way in


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request and a cap per client."""

    header_timeout_s: float = 10.0
    max_per_client: int = 64
    exempt: frozenset[str] = frozenset()  # trusted proxies: they carry many clients' connections
    open_per_client: dict[str, int]  # set per configured class (protocol_for): one server's count
    _header_timer: asyncio.TimerHandle | None = None
    _client: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if host and host not in self.exempt:
            client = client_key(host)
            if self.open_per_client.get(client, 0) >= self.max_per_client:
                transport.close()  # uvicorn's connection_lost undoes its own bookkeeping
                return
            self._client = client
            self.open_per_client[client] = self.open_per_client.get(client, 0) + 1
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in RECEIVING:  # a request's headers or body still to come
            self._arm_header_timer()
        else:
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is not h11.SEND_BODY:  # answered before its body came: still bounded
            self._disarm_header_timer()  # the keep-alive timer covers the idle time until the next byte

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        if self._client is not None:
            left = self.open_per_client.get(self._client, 1) - 1
            if left > 0:
                self.open_per_client[self._client] = left
            else:
                self.open_per_client.pop(self._client, None)
            self._client = None
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._on_header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _on_header_timeout(self) -> None:
        self._header_timer = None
        if self.conn.their_state in RECEIVING and not self.transport.is_closing():
            self.transport.close()


class LogThrottle(logging.Filter):
    """Lets each message template through at most once per `period_s`. uvicorn logs one warning per
    refused ("Exceeded concurrency limit.") or malformed request: under a flood that is a log line
    per request, hundreds of MB in seconds. `suppressed` counts what was held back."""

    MAX_KEYS = 1024

    def __init__(self, period_s: float = 10.0) -> None:
        super().__init__()
        self._period_s = period_s
        self._last: dict[tuple[str, str], float] = {}
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = time.monotonic()
        if now - self._last.get(key, float("-inf")) < self._period_s:
            self.suppressed += 1
            return False
        if len(self._last) >= self.MAX_KEYS:
            self._last.clear()
        self._last[key] = now
        return True


UVICORN_LOG_THROTTLE = LogThrottle()


def protocol_for(config: ApiConfig) -> type[HeaderTimeoutProtocol]:
    """A protocol class carrying this config's limits and its own count of open connections per
    client (uvicorn instantiates it per connection, all on the server's one event loop)."""
    return type(
        "ConfiguredHeaderTimeoutProtocol",
        (HeaderTimeoutProtocol,),
        {
            "header_timeout_s": config.header_timeout_s,
            "max_per_client": config.max_connections_per_client,
            "exempt": frozenset(config.trusted_proxies),
            "open_per_client": {},
        },
    )


def build_server(app: FastAPI, config: ApiConfig, host: str, port: int) -> uvicorn.Server:
    proxies = list(config.trusted_proxies)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            http=protocol_for(config),
            log_level="warning",
            access_log=False,
            # X-Forwarded-For is believed only from configured proxies: from anyone else it would let a
            # client pick its own address and so its own rate-limit and stream budget.
            proxy_headers=bool(proxies),
            forwarded_allow_ips=proxies or None,
            limit_concurrency=config.max_connections,
            # Open event streams would otherwise hold shutdown forever.
            timeout_graceful_shutdown=2,
        )
    )
    # After uvicorn.Config: it (re)configures logging, which keeps filters but not handlers.
    uvicorn_log = logging.getLogger("uvicorn.error")
    if UVICORN_LOG_THROTTLE not in uvicorn_log.filters:
        uvicorn_log.addFilter(UVICORN_LOG_THROTTLE)
    return server
