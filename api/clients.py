"""Which client a connection or request counts against: the budgets (rate limit, event streams,
connections) are per client, so a client must not be able to pick a fresh identity per request.

An IPv6 client holds a whole /64 (its provider routes it one), so its addresses count as one; an
IPv4-mapped IPv6 address is the IPv4 client it carries.
"""

from __future__ import annotations

import ipaddress

IPV6_CLIENT_PREFIX = 64


def client_key(host: str) -> str:
    """`host` as a budget key: the IPv4 address, the IPv6 /64 it lies in, or `host` itself when it
    is not an address (a unix socket path, uvicorn's "unknown")."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # a link-local zone names no client
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False))
    return str(address)
