"""Which network addresses the validator may connect to on a peer's behalf (SSRF defence).

A commitment names a host; the validator then makes requests to it from inside its own network.
Three layers keep that from reaching internal services:
- spelling: a host with a numeric-looking label in any base (`0x7f000001`, `127.0.0.0x1`, `2130706433`,
  `0177.1`) is refused unless it is a canonical dotted quad (resolvers read such names as addresses);
- resolution: a name is resolved and refused when any of its addresses is not public (loopback,
  private, link-local, CGNAT, multicast, reserved, unspecified, IPv4-mapped private);
- pinning: the request then goes to the address that was checked (`PinnedHost`), so a second DNS
  answer (rebinding) is never used. Redirects are not followed at all (validator/stores/peer_http.py).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import re
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)", re.IGNORECASE)

# Lookups run on a pool of their own, not on asyncio's default executor. A lookup that hangs (a
# peer's nameserver that never answers) holds its thread until the system resolver gives up, however
# soon the fetch stops waiting for it. On the default pool (min(32, CPUs + 4) threads, shared with
# the spool's file writes) hanging names starved honest peers' lookups into `unresolvable`, and
# `asyncio.run` waited for the stuck threads past the window's fetch deadline. Here a name has one
# lookup in flight at a time, which every request for it (HEAD, GET, retries, the upload poller's)
# shares: a peer's commitment names one host, so a hanging name holds one thread, and the pool's 512
# cover twice a full subnet. Threads start only when needed and no event loop waits for them (the
# interpreter still does at exit, up to the resolver's own timeout). One pool per process: a forked
# child would inherit one without threads.
_RESOLVERS: dict[int, ThreadPoolExecutor] = {}
_IN_FLIGHT: dict[tuple[int, str, int], Future[list[Any]]] = {}
_LOCK = threading.Lock()


def _lookup(host: str, port: int) -> Future[list[Any]]:
    """The lookup of (host, port) in flight, started when there is none."""
    key = (os.getpid(), host, port)
    with _LOCK:
        pending = _IN_FLIGHT.get(key)
        if pending is None:
            if key[0] not in _RESOLVERS:
                _RESOLVERS[key[0]] = ThreadPoolExecutor(max_workers=512, thread_name_prefix="gauntlet-dns")
            pending = _RESOLVERS[key[0]].submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
            _IN_FLIGHT[key] = pending
            started = True
        else:
            started = False
    if started:  # outside the lock: a callback on a finished future runs at once, in this thread
        pending.add_done_callback(functools.partial(_done, key))
    return pending


def _done(key: tuple[int, str, int], lookup: Future[list[Any]]) -> None:
    with _LOCK:
        if _IN_FLIGHT.get(key) is lookup:
            del _IN_FLIGHT[key]


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class HostRefused(Exception):
    """A host the validator will not connect to; `reason` is a stable short code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class PinnedHost:
    """A host name and the one checked address every request to it goes to."""

    host: str
    address: str

    @property
    def url_host(self) -> str:
        """The address as a URL's host part (IPv6 in brackets)."""
        return f"[{self.address}]" if ":" in self.address else self.address


def is_dotted_quad(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False


def numeric_looking(host: str) -> bool:
    """True when a label reads as a number in some base, which `inet_aton`-style parsers take for an
    address; only the canonical dotted quad is an acceptable numeric host."""
    return any(_NUMERIC_LABEL.fullmatch(label) for label in host.split(".")) and not is_dotted_quad(host)


# IPv6 that tunnels to an IPv4 address (6to4 2002::/16, Teredo 2001::/32: Python before 3.13 calls
# 6to4 of a private address global) or outside global unicast (site-local fec0::/10 passes is_global):
# a peer's AAAA record must name a plain global unicast address.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_TUNNELS = (ipaddress.IPv6Network("2002::/16"), ipaddress.IPv6Network("2001::/32"))


# IETF protocol assignments: Python before 3.11.10 / 3.12.4 calls most of 192.0.0.0/24 global
_PROTOCOL_ASSIGNMENTS = ipaddress.IPv4Network("192.0.0.0/24")


def is_public(address: IPAddress) -> bool:
    """A globally routable unicast address; anything else is internal to someone."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public(address.ipv4_mapped)
        if address not in _GLOBAL_UNICAST or any(address in net for net in _TUNNELS):
            return False
    elif address in _PROTOCOL_ASSIGNMENTS:
        return False
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_unspecified or address.is_loopback
    )


async def pin_host(host: str, port: int, *, allow_private: bool, timeout_s: float) -> PinnedHost:
    """Resolve `host` and return one address to connect to; refuse it when any answer is not public.

    Refusing on *any* internal answer (not only the first) closes the trick of a name that resolves
    to both a public and an internal address."""
    if numeric_looking(host):
        raise HostRefused("bad_host", "not a canonical IPv4 address")
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    addresses = [literal] if literal is not None else await _resolve(host, port, timeout_s)
    if not addresses:
        raise HostRefused("unresolvable", "the storage host has no address")
    if not allow_private and not all(is_public(a) for a in addresses):
        raise HostRefused("private_host", "the storage host resolves to a non-public address")
    return PinnedHost(host, str(addresses[0]))


async def _resolve(host: str, port: int, timeout_s: float) -> list[IPAddress]:
    try:
        async with asyncio.timeout(timeout_s):
            # shielded: a request that stops waiting must not cancel the lookup others share (its
            # outcome is then read by the callback, so an abandoned failure is not logged as unread)
            shared = asyncio.wrap_future(_lookup(host, port))
            shared.add_done_callback(lambda f: f.cancelled() or f.exception())
            infos = await asyncio.shield(shared)
    except (OSError, TimeoutError, UnicodeError) as error:
        raise HostRefused(
            "unresolvable", f"the storage host does not resolve ({type(error).__name__})"
        ) from None
    out: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])  # drop an IPv6 zone id
        if address not in out:
            out.append(address)
    return out
