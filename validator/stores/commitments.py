"""Peer storage locations: the commitment string format and a strict parser.

A peer commits one string on chain that says where its submissions live. Commitments are
peer-controlled and hostile, so the parser accepts one narrow grammar and names its reason
for everything else. Two forms:

    https://[KEY_ID:SECRET@]HOST[:PORT]/BUCKET[?region=REGION]   an S3-compatible bucket
    file:///ABSOLUTE/PATH                                        a local folder (demo, tests)

- S3: path-style addressing at endpoint `https://HOST[:PORT]`; KEY_ID and SECRET are the
  bucket's read-only credentials, percent-encoded (`/` → `%2F`, `+` → `%2B`); without them the
  bucket is read anonymously. REGION defaults to `auto` (Cloudflare R2).
- `http://` and loopback/private hosts (numeric spellings in any base, single-label names) are
  refused unless `LocationPolicy` allows them (the validator would otherwise fetch whatever internal
  address a peer names); `file://` likewise. Names are resolved and checked again at fetch time
  (validator/stores/hostcheck.py).

Example: `https://0123abcd:s3cr3t@acc.r2.cloudflarestorage.com/gauntlet-5f3a?region=auto`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from validator.stores.hostcheck import is_dotted_quad, is_public, numeric_looking

MAX_COMMITMENT_CHARS = 512

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
_REGION = re.compile(r"[a-z0-9-]{1,32}")
_CREDENTIAL = re.compile(r"[\x21-\x7e]{1,128}")
_PATH = re.compile(r"/[A-Za-z0-9._/-]{0,400}")


class LocationError(ValueError):
    """A commitment that is not a usable storage location; `reason` is a short code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class LocationPolicy:
    """Which locations this validator is willing to fetch from."""

    allow_http: bool = False
    allow_private_hosts: bool = False
    allow_file: bool = False
    # Host suffixes of trusted providers (e.g. ".r2.cloudflarestorage.com"); empty allows any public
    # host, which a real-network validator refuses unless `allow_any_storage_host` is set.
    allowed_host_suffixes: tuple[str, ...] = ()

    @staticmethod
    def local() -> LocationPolicy:
        """Everything allowed: the demo and tests, where peers live on this machine."""
        return LocationPolicy(allow_http=True, allow_private_hosts=True, allow_file=True)


@dataclass(frozen=True, slots=True)
class StorageLocation:
    """A parsed peer location: an S3 bucket (`scheme` https/http) or a local folder (`file`)."""

    scheme: str
    host: str = ""
    port: int | None = None
    bucket: str = ""
    region: str = "auto"
    access_key_id: str = ""
    # Kept out of repr so logs and tracebacks never carry a peer's secret.
    secret_access_key: str = field(default="", repr=False)
    path: str = ""

    @property
    def is_file(self) -> bool:
        return self.scheme == "file"

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL, e.g. `https://host:port`."""
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{self.host}{port}"

    def to_commitment(self) -> str:
        """The canonical commitment string; `parse_location` of it gives this location back."""
        if self.is_file:
            return f"file://{self.path}"
        creds = ""
        if self.access_key_id:
            creds = f"{quote(self.access_key_id, safe='')}:{quote(self.secret_access_key, safe='')}@"
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{creds}{self.host}{port}/{self.bucket}?region={self.region}"


def parse_location(text: str, policy: LocationPolicy | None = None) -> StorageLocation:
    """Parse one commitment; raises `LocationError(reason, detail)` for anything else."""
    policy = policy or LocationPolicy()
    if not isinstance(text, str) or not text:
        raise LocationError("empty", "no commitment")
    if len(text) > MAX_COMMITMENT_CHARS:
        raise LocationError("too_long", f"{len(text)} chars > {MAX_COMMITMENT_CHARS}")
    if any(not ("\x21" <= ch <= "\x7e") for ch in text):
        raise LocationError("bad_chars", "only printable ASCII without spaces is allowed")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise LocationError("bad_url", str(error)) from None
    if parts.fragment:
        raise LocationError("bad_url", "a fragment is not allowed")
    if port == 0:  # read as "no port" downstream: the Host header and the connection disagreed
        raise LocationError("bad_url", "port 0 is not a port")
    if parts.scheme == "file":
        return _parse_file(parts.netloc, parts.path, parts.query, policy)
    if parts.scheme not in ("https", "http"):
        raise LocationError("bad_scheme", f"scheme {parts.scheme!r} is not https, http or file")
    if parts.scheme == "http" and not policy.allow_http:
        raise LocationError("insecure", "http:// is not allowed by this validator")
    host = _check_host(parts.hostname or "", policy)
    bucket = parts.path.removeprefix("/").removesuffix("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise LocationError("bad_bucket", f"{bucket[:70]!r} is not an S3 bucket name")
    key_id, secret = _credentials(parts.username, parts.password)
    return StorageLocation(
        scheme=parts.scheme,
        host=host,
        port=port,
        bucket=bucket,
        region=_region(parts.query),
        access_key_id=key_id,
        secret_access_key=secret,
    )


def parse_commitments(
    commitments: Mapping[str, str], policy: LocationPolicy | None = None
) -> tuple[dict[str, StorageLocation], dict[str, LocationError]]:
    """Split commitments into usable locations and per-hotkey rejections."""
    good: dict[str, StorageLocation] = {}
    bad: dict[str, LocationError] = {}
    for hotkey, text in commitments.items():
        try:
            good[hotkey] = parse_location(text, policy)
        except LocationError as error:
            bad[hotkey] = error
    return good, bad


def _parse_file(netloc: str, path: str, query: str, policy: LocationPolicy) -> StorageLocation:
    if not policy.allow_file:
        raise LocationError("bad_scheme", "file:// locations are not allowed by this validator")
    if netloc or query:
        raise LocationError("bad_path", "file:// takes an absolute path only (file:///path)")
    if not _PATH.fullmatch(path) or "/../" in f"{path}/" or "//" in path:
        raise LocationError("bad_path", f"{path[:70]!r} is not a plain absolute path")
    return StorageLocation(scheme="file", path=path.rstrip("/") or "/")


def _under_any(host: str, suffixes: tuple[str, ...]) -> bool:
    """`host` is one of the domains or below one, on a label boundary: `amazonaws.com` and
    `.amazonaws.com` both admit `b.s3.amazonaws.com`, never `evilamazonaws.com`."""
    name = host.lower().rstrip(".")
    domains = [s.lower().strip(".") for s in suffixes if s.strip(".")]
    return any(name == d or name.endswith("." + d) for d in domains)


def _check_host(host: str, policy: LocationPolicy) -> str:
    if not _HOST.fullmatch(host):
        raise LocationError("bad_host", f"{host[:70]!r} is not a host name or IPv4 address")
    # A label that reads as a number in any base (`2130706433`, `127.1`, `0x7f000001`, `127.0.0.0x1`)
    # is an IP in some spelling that resolvers may map to loopback: only the canonical dotted quad.
    if numeric_looking(host):
        raise LocationError("bad_host", f"{host} is not a canonical IPv4 address")
    if policy.allowed_host_suffixes and not _under_any(host, policy.allowed_host_suffixes):
        raise LocationError(
            "host_not_allowed", f"{host} is not one of the storage providers this validator trusts"
        )
    if policy.allow_private_hosts:
        return host
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        raise LocationError("private_host", f"{host} is a loopback name")
    if is_dotted_quad(host):
        if not is_public(ipaddress.ip_address(host)):
            raise LocationError("private_host", f"{host} is not a public address")
        return host
    if "." not in host:
        # a single label is a local name (`postgres`, `ip6-localhost`, the machine's own hostname):
        # no public S3 endpoint has one
        raise LocationError("private_host", f"{host} is not a public domain name")
    # A public-looking name may still resolve to an internal address: the fetcher resolves it right
    # before each request, refuses internal answers and connects to the address it checked.
    return host


def _credentials(username: str | None, password: str | None) -> tuple[str, str]:
    if username is None and password is None:
        return "", ""
    key_id, secret = unquote(username or ""), unquote(password or "")
    if not _CREDENTIAL.fullmatch(key_id) or not _CREDENTIAL.fullmatch(secret):
        raise LocationError("bad_credentials", "credentials must be KEY_ID:SECRET, 1-128 chars each")
    return key_id, secret


def _region(query: str) -> str:
    if not query:
        return "auto"
    name, sep, value = query.partition("=")
    if name != "region" or not sep or not _REGION.fullmatch(value):
        raise LocationError("bad_query", "only ?region=NAME is allowed")
    return value
