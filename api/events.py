"""Live events: one Redis pub/sub subscription per process, fanned out to server-sent-event clients.

The validator publishes JSON objects on EVENTS_CHANNEL, shaped {"type": T, "window": int, ...} with
T one of EVENT_TYPES. It imports nothing from api/ and spells the channel name itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

EVENTS_CHANNEL: Final = "gauntlet:events"
EVENT_TYPES: Final = frozenset({"window_opened", "peer_scored", "window_committed", "weights_set"})
CLIENT_QUEUE_SIZE: Final = 256
RECONNECT_MAX_S: Final = 10.0

log = logging.getLogger(__name__)


def parse_event(raw: bytes | str) -> dict[str, Any] | None:
    """The event as a dict, or None when it is not a well-formed event (it is then dropped)."""
    try:
        event = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(event, dict) or event.get("type") not in EVENT_TYPES:
        return None
    window = event.get("window")
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        return None
    return event


def format_sse(event: dict[str, Any]) -> bytes:
    """One server-sent event: the event name is the type, the data the JSON object on one line."""
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


class EventBroker:
    """Fans events out to per-client queues; a slow client loses events rather than stalling others."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._clients: set[asyncio.Queue[dict[str, Any]]] = set()
        self._on_event = on_event
        self.dropped = 0

    @property
    def n_clients(self) -> int:
        return len(self._clients)

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(CLIENT_QUEUE_SIZE)
        self._clients.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self._clients.discard(queue)

    def publish(self, event: dict[str, Any]) -> None:
        if self._on_event is not None:
            self._on_event(event)
        for queue in self._clients:
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                self.dropped += 1


class StreamSlots:
    """Counts open event streams, in all and per client address.

    Each stream holds a connection and a descriptor for as long as the client likes, so without a
    cap one client within its request budget can exhaust the process's descriptors.
    """

    def __init__(self, total: int, per_client: int) -> None:
        self._total = total
        self._per_client = per_client
        self._open: dict[str, int] = {}
        self._n = 0

    def acquire(self, client: str) -> bool:
        """Takes a slot for `client`, or returns False when it or the process is at its cap."""
        held = self._open.get(client, 0)
        if self._n >= self._total or held >= self._per_client:
            return False
        self._open[client] = held + 1
        self._n += 1
        return True

    def release(self, client: str) -> None:
        held = self._open.get(client, 0)
        if held <= 0:
            return
        self._n -= 1
        if held == 1:
            del self._open[client]
        else:
            self._open[client] = held - 1


class ReleasingStream(StreamingResponse):
    """A streaming response that runs `on_close` once when it ends, however it ends: a stream that
    fails before its first byte (the client already gone) never enters its generator's finally."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close: Callable[[], None] | None = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._on_close is not None:
                self._on_close()
                self._on_close = None


async def stream_events(broker: EventBroker, keepalive_s: float, max_s: float) -> AsyncIterator[bytes]:
    """The body of GET /v1/events: a retry hint, then events, with a comment line while idle.

    It ends after `max_s`; an EventSource reconnects by itself, and a forgotten client lets go.
    """
    queue = broker.subscribe()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_s
    try:
        yield b"retry: 5000\n: connected\n\n"
        while (left := deadline - loop.time()) > 0:
            try:
                event = await asyncio.wait_for(queue.get(), timeout=min(keepalive_s, left))
            except TimeoutError:
                if deadline - loop.time() > 0:
                    yield b": keep-alive\n\n"
                continue
            yield format_sse(event)
    finally:
        broker.unsubscribe(queue)


async def relay_events(redis_url: str, channel: str, broker: EventBroker) -> None:
    """Subscribe to `channel` and publish each event to the broker, reconnecting with backoff.

    Runs until cancelled. It has its own connection with no read timeout: a quiet channel is normal.
    """
    delay = 0.5
    while True:
        client = Redis.from_url(redis_url, socket_connect_timeout=2.0)
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                delay = 0.5
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    event = parse_event(message["data"])
                    if event is not None:
                        broker.publish(event)
        except (RedisError, OSError) as exc:
            log.warning("event relay lost redis, retrying in %.1f s: %s", delay, exc)
        finally:
            await client.aclose()
        await asyncio.sleep(delay)
        delay = min(delay * 2, RECONNECT_MAX_S)
