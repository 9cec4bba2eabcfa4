"""A commitment cannot point the validator at its own network: spellings, resolution, redirects."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from obstore.store import S3Store

from scoring.ranking import Status
from scoring.types import Reason
from tests.fake_s3 import FakeObject, FakeS3, serving
from validator.stores.commitments import LocationError, LocationPolicy, StorageLocation, parse_location
from validator.stores.hostcheck import HostRefused, is_public, numeric_looking, pin_host
from validator.stores.objstore import FetchConfig, Fetcher, FetchRequest, object_key, open_store
from validator.stores.peer_fetch import GENERIC, TIMED_OUT
from validator.stores.peer_http import HttpLimits, PeerHttp, StoreError

T0 = time.time() - 10
LOOPBACK_OK = FetchConfig(allow_private_hosts=True, retries=0, head_timeout_s=2.0)


@pytest.mark.parametrize(
    "host",
    [
        "0x7f000001", "127.0.0.0x1", "0xa9fea9fe", "0X7F.1", "0x0a.0x0.0x0.0x1", "017700000001",
        "10.0.0.0x2", "a.0x10.example.com", "192.168.1", "4294967295",
    ],
)  # fmt: skip
def test_numeric_spellings_in_any_base_are_refused(host: str) -> None:
    assert numeric_looking(host)
    for policy in (LocationPolicy(), LocationPolicy.local()):  # even where loopback is allowed
        with pytest.raises(LocationError) as info:
            parse_location(f"https://{host}/bucket", policy)
        assert info.value.reason == "bad_host"


@pytest.mark.parametrize("host", ["ip6-localhost", "postgres", "redis", "metadata", socket.gethostname()])
def test_single_label_names_are_local_and_refused(host: str) -> None:
    with pytest.raises(LocationError) as info:
        parse_location(f"https://{host}/bucket")
    assert info.value.reason in ("private_host", "bad_host")


@pytest.mark.parametrize("host", ["100.64.0.1", "224.0.0.251", "240.0.0.1", "0.0.0.0", "198.18.0.1"])
def test_non_public_dotted_quads_are_refused(host: str) -> None:
    with pytest.raises(LocationError) as info:
        parse_location(f"https://{host}/bucket")
    assert info.value.reason == "private_host"


def test_port_0_is_refused() -> None:
    """Downstream `port or 443` read 0 as no port: the connection went to 443, the Host header
    and the signed URL named :0."""
    with pytest.raises(LocationError) as info:
        parse_location("https://example.org:0/bucket")
    assert info.value.reason == "bad_url"


def test_public_names_and_addresses_still_parse() -> None:
    for host in ("8.8.8.8", "acc.r2.cloudflarestorage.com", "s3.eu-west-1.amazonaws.com", "a1b2.example.org"):
        assert parse_location(f"https://{host}/bucket").host == host


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True), ("1.1.1.1", True), ("2606:4700:4700::1111", True),
        ("127.0.0.1", False), ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.0.1", False),
        ("169.254.169.254", False), ("100.64.0.1", False), ("224.0.0.1", False), ("240.0.0.1", False),
        ("0.0.0.0", False), ("::1", False), ("fe80::1", False), ("fc00::1", False), ("ff02::1", False),
        ("::ffff:127.0.0.1", False), ("::ffff:169.254.169.254", False), ("::", False),
        # 6to4 of loopback, the metadata address and 10/8; site-local; Teredo; NAT64; a public 6to4
        ("2002:7f00:1::1", False), ("2002:a9fe:a9fe::", False), ("2002:a00:1::1", False),
        ("fec0::1", False), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False), ("64:ff9b::a00:1", False),
        ("2002:808:808::1", False), ("2a00:1450:4001:80b::200e", True),
        # protocol assignments, global to Python before 3.11.10 / 3.12.4
        ("192.0.0.8", False), ("192.0.0.100", False), ("::ffff:192.0.0.9", False), ("192.0.1.1", True),
    ],
)  # fmt: skip
def test_public_addresses(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public


@pytest.mark.parametrize("host", ["localhost", socket.gethostname()])
def test_names_resolving_to_internal_addresses_are_refused_at_fetch(host: str) -> None:
    resolved = {str(info[4][0]).split("%")[0] for info in socket.getaddrinfo(host, 80)}
    if all(is_public(ipaddress.ip_address(a)) for a in resolved):
        pytest.skip(f"{host} resolves to public addresses here")
    with pytest.raises(HostRefused) as info:
        asyncio.run(pin_host(host, 80, allow_private=False, timeout_s=2.0))
    assert info.value.reason == "private_host"


def test_a_public_literal_is_pinned_without_resolving() -> None:
    pinned = asyncio.run(pin_host("8.8.8.8", 443, allow_private=False, timeout_s=0.01))
    assert (pinned.address, pinned.url_host) == ("8.8.8.8", "8.8.8.8")


@pytest.fixture
def store() -> Iterator[FakeS3]:
    with serving(FakeS3()) as s:
        s.put(f"/bucket/{object_key(5, 'peer')}", FakeObject(b"secret-internal-bytes", T0 + 1))
        yield s


def fetch(location: StorageLocation, config: FetchConfig = LOOPBACK_OK) -> tuple[str, str | None, str]:
    result = asyncio.run(Fetcher(config).fetch(FetchRequest("peer", location, object_key(5, "peer"), T0)))
    return result.status, result.reason, result.detail


def test_a_name_resolving_to_loopback_is_never_contacted(store: FakeS3) -> None:
    """`localhost` stands for any DNS name that answers with an internal address: the fetch
    refuses it before a single byte is sent, unless loopback is explicitly allowed (tests)."""
    location = StorageLocation(scheme="http", host="localhost", port=store.port, bucket="bucket")
    assert fetch(location, FetchConfig(retries=0)) == (
        Status.MISSING, Reason.BAD_LOCATION, GENERIC[Reason.BAD_LOCATION],
    )  # fmt: skip
    assert store.log == []
    assert fetch(location)[0] == Status.OK  # the allow-loopback switch of local subnets
    # the connection went to the checked address, with the name kept as Host (signatures cover it)
    assert {host for _, _, host in store.log} == {f"localhost:{store.port}"}


def test_redirects_are_not_followed(store: FakeS3) -> None:
    with serving(FakeS3(redirect_to=f"http://127.0.0.1:{store.port}")) as bouncer:
        location = StorageLocation(scheme="http", host="127.0.0.1", port=bouncer.port, bucket="bucket")
        status, reason, _ = fetch(location)
    assert (status, reason) == (Status.MISSING, Reason.FETCH_FAILED)
    assert bouncer.requests("HEAD") and store.log == []  # the target of the redirect saw nothing


def test_failure_details_carry_no_error_text_ports_or_timings() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    location = StorageLocation(scheme="http", host="127.0.0.1", port=port, bucket="bucket")
    status, reason, detail = fetch(location)
    assert (status, reason) == (Status.MISSING, Reason.FETCH_FAILED)
    assert detail in (*GENERIC.values(), TIMED_OUT)
    assert not re.search(r"\d", detail)  # a port-scan oracle needs ports or timings


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for `localhost` (its own CA), made with the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_https_goes_to_the_checked_address_and_verifies_the_name(certificate: tuple[Path, Path]) -> None:
    """The URL carries the pinned address; TLS still checks the certificate against the name."""
    cert, key = certificate
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    with serving(FakeS3(), tls=server_tls) as tls_store:
        tls_store.put(f"/bucket/{object_key(5, 'peer')}", FakeObject(b"over-tls", T0 + 1))

        async def head(host: str) -> int:
            location = StorageLocation(scheme="https", host=host, port=tls_store.port, bucket="bucket")
            limits = HttpLimits(allow_private_hosts=True, verify=trusted)
            store = open_store(location)
            assert isinstance(store, S3Store)
            async with PeerHttp(limits) as http:
                return (await http.head(location, store, object_key(5, "peer"))).size

        assert asyncio.run(head("localhost")) == len(b"over-tls")
        assert {host for _, _, host in tls_store.log} == {f"localhost:{tls_store.port}"}
        with pytest.raises(StoreError):  # the certificate is not for 127.0.0.1: refused, not ignored
            asyncio.run(head("127.0.0.1"))

        async def one_after_the_other() -> tuple[bytes | Path, str]:
            """A whole GET from a name whose certificate checks (its connection goes back to the
            pool), then a HEAD to another name served at the same address, in one fetch: it must
            not ride that connection, whose certificate was checked for the first name only (one
            pool keyed on the address let it through, and a presigned request with it)."""
            limits = HttpLimits(allow_private_hosts=True, verify=trusted)
            key = object_key(5, "peer")
            async with PeerHttp(limits) as http:
                first = StorageLocation(
                    scheme="https", host="localhost", port=tls_store.port, bucket="bucket"
                )
                store = open_store(first)
                assert isinstance(store, S3Store)
                body = await http.get(first, store, key, await http.head(first, store, key))
                other = StorageLocation(
                    scheme="https", host="127.0.0.1", port=tls_store.port, bucket="bucket"
                )
                store = open_store(other)
                assert isinstance(store, S3Store)
                try:
                    await http.head(other, store, key)
                except StoreError as refused:
                    return body, str(refused)
                return body, "accepted"

        body, second = asyncio.run(one_after_the_other())
        assert body == b"over-tls" and "CERTIFICATE_VERIFY_FAILED" in second, second


def test_hanging_lookups_neither_starve_honest_ones_nor_hold_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forty names under a nameserver that never answers (each lookup holds its thread for 3 s):
    an honest name looked up after them still resolves within its 1 s, and the event loop ends
    without waiting for the stuck lookups (it would overrun the window's fetch deadline)."""
    real = socket.getaddrinfo

    def resolver(host: str, port: int, *args: object, **kwargs: object) -> list[object]:
        if host.endswith(".hangs.example"):
            time.sleep(3.0)
            raise socket.gaierror("timed out")
        if host == "honest.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]
        return real(host, port, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)

    async def window() -> tuple[list[str], str]:
        hostile = [
            pin_host(f"p{i}.hangs.example", 443, allow_private=False, timeout_s=0.5) for i in range(40)
        ]
        tasks = [asyncio.ensure_future(h) for h in hostile]
        await asyncio.sleep(0.05)  # the hostile lookups hold their threads first
        honest = await pin_host("honest.example", 443, allow_private=False, timeout_s=1.0)
        refused = await asyncio.gather(*tasks, return_exceptions=True)
        return [r.reason if isinstance(r, HostRefused) else "pinned" for r in refused], honest.address

    started = time.monotonic()
    reasons, address = asyncio.run(window())
    assert time.monotonic() - started < 2.0
    assert address == "93.184.216.34" and reasons == ["unresolvable"] * 40


def test_requests_for_a_name_share_its_lookup_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """HEAD, GET, retries and the upload poller each ask for the peer's host: while its lookup
    hangs, they wait on that one instead of holding a thread each."""
    calls: list[str] = []

    def resolver(host: str, port: int, *args: object, **kwargs: object) -> list[object]:
        calls.append(host)
        time.sleep(1.0)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)

    async def requests() -> list[object]:
        asks = [pin_host("slow.example", 443, allow_private=False, timeout_s=t) for t in [0.2] * 99 + [3.0]]
        return await asyncio.gather(*asks, return_exceptions=True)

    out = asyncio.run(requests())
    assert calls == ["slow.example"]
    assert [isinstance(r, HostRefused) for r in out] == [True] * 99 + [False]
    assert getattr(out[-1], "address", None) == "93.184.216.34"  # the lookup went on for the patient one
