"""HEAD and GET of one object in a peer's S3 bucket, over connections the validator controls.

obstore's client follows redirects and resolves names on its own, so a peer's store could send the
validator anywhere. Reads from peers go through httpx instead: the host is resolved and checked
(validator/stores/hostcheck.py), the connection goes to that checked address (TLS still verifies the
certificate against the host name, through SNI), redirects are refused, compressed bodies are not
decoded, and a body that arrives slower than a floor rate is abandoned. Requests are signed by
obstore (presigned URLs) when the location carries credentials.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import BinaryIO, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import obstore as obs
import structlog
from obstore.store import S3Store

from scoring.types import Reason
from storage.fields import TAG_CHARS, printable
from validator.stores.commitments import StorageLocation
from validator.stores.hostcheck import HostRefused, pin_host

log = structlog.get_logger(__name__)


class StoreError(Exception):
    """A failed request: `reason` is the code the API shows, the message goes to logs only."""

    def __init__(self, reason: str, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.transient = transient  # worth one more attempt (not a timeout: that costs a whole budget)


@dataclass(frozen=True, slots=True)
class ObjectHead:
    size: int
    etag: str | None
    version: str | None
    last_modified: float | None  # unix seconds, as the store reports it


@dataclass(frozen=True, slots=True)
class HttpLimits:
    connect_timeout_s: float = 5.0
    min_bytes_per_s: float = 1 << 20  # a body slower than this (after the grace) is abandoned
    rate_grace_s: float = 5.0
    allow_private_hosts: bool = False  # tests and local subnets serve peers on 127.0.0.1
    verify: ssl.SSLContext | bool = True  # certificate checks (a test CA in tests; never False in use)


class PeerHttp:
    """The httpx clients of one event loop (`async with`), shared by every peer fetched in it: one
    per store name. Requests go to the checked address, so one pool would key its connections on
    that address alone and hand a connection whose certificate was checked for one name to another
    name served there (a peer's own host on a victim's CDN address), unchecked."""

    def __init__(self, limits: HttpLimits, connections: int = 100) -> None:
        self.limits, self._connections = limits, max(connections, 1)
        self._clients: dict[tuple[str, str, int], httpx.AsyncClient] = {}
        # one TLS context for every client: each built its own, loading the CA bundle (35 ms and
        # 0.7 MB each, on the fetch loop) for every store name
        verify = limits.verify
        self._tls = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        self._reached: dict[str, tuple[int, int, float]] = {}  # by key: (size, bytes read, seconds)

    def client(self, scheme: str, host: str, port: int) -> httpx.AsyncClient:
        """The client for one store name; its connections serve that name only."""
        key = (scheme, host, port)
        if (found := self._clients.get(key)) is not None:
            return found
        timeout = httpx.Timeout(self.limits.connect_timeout_s, read=self.limits.rate_grace_s)
        # trust_env=False: a proxy or netrc in the environment must not change where requests go
        made = self._clients[key] = httpx.AsyncClient(
            follow_redirects=False, timeout=timeout, limits=httpx.Limits(max_connections=self._connections),
            trust_env=False, verify=self._tls,
        )  # fmt: skip
        return made

    async def __aenter__(self) -> PeerHttp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                await client.aclose()
            except Exception:  # one that fails to close must not leave the others open
                log.warning("http_client_not_closed", exc_info=True)

    async def head(self, location: StorageLocation, store: S3Store, key: str) -> ObjectHead:
        async with self._request("HEAD", location, store, key, {}) as response:
            return _parse_head(response)

    async def get(
        self, location: StorageLocation, store: S3Store, key: str, head: ObjectHead, spool: Path | None = None
    ) -> bytes | Path:
        """The object's bytes (or, with `spool`, the file they were written to), pinned to the etag
        HEAD saw and cut at the size HEAD reported."""
        headers = {"If-Match": head.etag} if head.etag else {}
        async with self._request("GET", location, store, key, headers) as response:
            with Body(head.size, spool) as body:
                started = time.monotonic()
                try:
                    await self._read(response, body)
                except BaseException:  # cut off: how far it got, for `on_pace` (a count, not the bytes)
                    self._reached[key] = (body.size, body.count, time.monotonic() - started)
                    raise
                return body.finish()

    def on_pace(self, key: str, budget_s: float) -> bool:
        """Was the last GET of `key` that was cut off receiving its body fast enough to finish within
        `budget_s`?
        False when it received nothing (a store that stalls earns no excuse)."""
        size, count, elapsed = self._reached.pop(key, (0, 0, 0.0))
        return count > 0 and size * elapsed / count <= budget_s

    def _request(
        self, method: Literal["HEAD", "GET"], location: StorageLocation, store: S3Store, key: str,
        headers: dict[str, str],
    ) -> _Exchange:  # fmt: skip
        return _Exchange(self, method, location, store, key, headers)

    async def _read(self, response: httpx.Response, body: Body) -> None:
        started = time.monotonic()
        chunks = response.aiter_raw()
        while True:
            # wait no longer than the floor rate allows for what has arrived so far
            allowed = max(self.limits.rate_grace_s, body.count / self.limits.min_bytes_per_s)
            try:
                async with asyncio.timeout(max(0.0, started + allowed - time.monotonic())):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise StoreError(
                    Reason.FETCH_FAILED, f"body slower than the floor rate at {body.count} B"
                ) from None
            except httpx.TimeoutException:  # httpx's own read timeout: a stall, not worth a retry
                raise StoreError(Reason.FETCH_FAILED, f"body stalled at {body.count} B") from None
            except httpx.HTTPError as error:  # a short or malformed body, a dropped connection
                raise StoreError(
                    Reason.FETCH_FAILED, f"body broken at {body.count} B: {type(error).__name__}: {error}",
                    transient=True,
                ) from None  # fmt: skip
            await body.add(chunk)


class Body:
    """Where a GET's bytes go, bounded by the size HEAD reported: memory, or a file (`spool`) so that
    a submission is never whole in memory. The file is written as `NAME.part` and renamed on
    completion; a body that fails is removed. Use with `with`; `finish` ends it."""

    def __init__(self, size: int, spool: Path | None = None) -> None:
        self.size, self.spool, self.count = size, spool, 0
        self._buffer = bytearray()
        self._part = spool.with_name(spool.name + ".part") if spool is not None else None
        self._file: BinaryIO | None = None

    def __enter__(self) -> Body:
        if self._part is not None:
            self._part.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self._part, "wb")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:  # not finished: an error or a short body
            self._file.close()
            self._file = None
            if self._part is not None:
                self._part.unlink(missing_ok=True)

    async def add(self, chunk: bytes | memoryview) -> None:
        """One more piece; a body longer than HEAD said is cut off (a changed object or a liar)."""
        if self.count + len(chunk) > self.size:
            raise StoreError(
                Reason.FETCH_FAILED, f"body exceeds the {self.size} bytes HEAD reported", transient=True
            )
        if self._file is not None:
            # a worker thread writes: a disk throttling writeback must not stall the fetch loop, where
            # every other peer's floor-rate timeout runs
            await asyncio.to_thread(self._file.write, chunk)
        else:
            self._buffer += chunk
        self.count += len(chunk)

    def finish(self) -> bytes | Path:
        if self.count != self.size:
            raise StoreError(
                Reason.FETCH_FAILED, f"body ended at {self.count} of {self.size} bytes", transient=True
            )
        if self._file is None or self._part is None or self.spool is None:
            return bytes(self._buffer)
        self._file.close()
        self._file = None
        os.replace(self._part, self.spool)
        return self.spool


class _Exchange:
    """Resolve, check, sign and send one request; yields the response with its body unread."""

    def __init__(
        self, http: PeerHttp, method: Literal["HEAD", "GET"], location: StorageLocation, store: S3Store,
        key: str, headers: dict[str, str],
    ) -> None:  # fmt: skip
        self.http, self.method, self.location, self.store = http, method, location, store
        self.key, self.headers = key, headers
        self.response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        url, host_header, sni = await self._target()
        loc = self.location
        client = self.http.client(loc.scheme, loc.host, loc.port or (443 if loc.scheme == "https" else 80))
        request = client.build_request(
            self.method, url, headers={"Host": host_header, "Accept-Encoding": "identity", **self.headers},
            extensions={"sni_hostname": sni} if sni else {},
        )  # fmt: skip
        try:
            self.response = await client.send(request, stream=True)
        except httpx.TimeoutException:
            raise TimeoutError(f"{self.method} timed out") from None
        except httpx.HTTPError as error:
            raise StoreError(
                Reason.FETCH_FAILED, f"{type(error).__name__}: {error}", transient=True
            ) from None
        try:
            _check_status(self.response)
        except BaseException:
            await self.response.aclose()  # __aexit__ will not run: give the connection back now
            raise
        return self.response

    async def __aexit__(self, *exc: object) -> None:
        if self.response is not None:
            await self.response.aclose()

    async def _target(self) -> tuple[str, str, str | None]:
        """The URL with the host replaced by its checked address, the Host header, and the SNI name."""
        loc = self.location
        port = loc.port or (443 if loc.scheme == "https" else 80)
        try:
            pinned = await pin_host(
                loc.host, port, allow_private=self.http.limits.allow_private_hosts,
                timeout_s=self.http.limits.connect_timeout_s,
            )  # fmt: skip
        except HostRefused as refused:
            raise StoreError(Reason.BAD_LOCATION, f"{refused.reason}: {refused.detail}") from None
        if loc.access_key_id:
            signed = await obs.sign_async(self.store, self.method, self.key, timedelta(minutes=10))
        else:
            signed = f"{loc.endpoint}/{loc.bucket}/{quote(self.key, safe='/')}"
        parts = urlsplit(signed)
        netloc = f"{pinned.url_host}:{port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        return url, parts.netloc, loc.host if loc.scheme == "https" else None


def _check_status(response: httpx.Response) -> None:
    code = response.status_code
    if code == 200:
        return
    if code == 404:
        raise FileNotFoundError("no such object")
    if 300 <= code < 400:
        raise StoreError(Reason.FETCH_FAILED, f"redirect {code} refused")
    if code in (401, 403):
        raise StoreError(Reason.FETCH_FAILED, f"access denied ({code})")
    raise StoreError(Reason.FETCH_FAILED, f"status {code}", transient=code in (412, 429) or code >= 500)


def _parse_head(response: httpx.Response) -> ObjectHead:
    try:
        size = int(response.headers["content-length"])
        modified = response.headers.get("last-modified")
        stamp = round(parsedate_to_datetime(modified).timestamp(), 6) if modified else None
    except (KeyError, ValueError, TypeError, IndexError, OverflowError) as error:
        # OverflowError: a Last-Modified year past datetime's range
        raise StoreError(Reason.FETCH_FAILED, f"unusable HEAD headers: {error}") from None
    if not 0 <= size < 1 << 63:  # no store holds more; the record's BigInteger could not hold it either
        raise StoreError(Reason.FETCH_FAILED, "content-length out of range")
    # An ETag is sent back (If-Match) and recorded: printable ASCII that fits its column. A version id
    # is only informative: one that is not usable is dropped, not held against the peer.
    etag, version = response.headers.get("etag"), response.headers.get("x-amz-version-id")
    if etag and not printable(etag, TAG_CHARS):  # an empty one is no ETag (no If-Match is sent)
        raise StoreError(Reason.FETCH_FAILED, f"unusable etag: not printable ASCII of {TAG_CHARS} at most")
    return ObjectHead(size, etag, version if version and printable(version, TAG_CHARS) else None, stamp)
