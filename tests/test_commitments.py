"""The commitment format: what a peer may publish as its storage location, and what is refused."""

from __future__ import annotations

import pytest

from validator.stores.commitments import (
    LocationError,
    LocationPolicy,
    StorageLocation,
    parse_commitments,
    parse_location,
)

LOCAL = LocationPolicy.local()


def test_r2_location_with_credentials() -> None:
    text = "https://0123abcd:s3cr%2Ft%2Bx@acc.r2.cloudflarestorage.com/gauntlet-5f3a?region=auto"
    loc = parse_location(text)
    assert loc == StorageLocation(
        scheme="https", host="acc.r2.cloudflarestorage.com", port=None, bucket="gauntlet-5f3a",
        region="auto", access_key_id="0123abcd", secret_access_key="s3cr/t+x",
    )  # fmt: skip
    assert loc.endpoint == "https://acc.r2.cloudflarestorage.com"
    assert parse_location(loc.to_commitment()) == loc
    assert "s3cr" not in repr(loc)  # secrets stay out of logs


def test_anonymous_bucket_with_port_and_default_region() -> None:
    loc = parse_location("https://s3.example.com:8443/my.bucket-1")
    assert (loc.host, loc.port, loc.bucket, loc.region, loc.access_key_id) == (
        "s3.example.com", 8443, "my.bucket-1", "auto", "",
    )  # fmt: skip
    assert loc.endpoint == "https://s3.example.com:8443"


def test_local_policy_allows_http_loopback_and_files() -> None:
    loc = parse_location("http://127.0.0.1:8333/gauntlet", LOCAL)
    assert loc.endpoint == "http://127.0.0.1:8333"
    folder = parse_location("file:///tmp/peers/p1/", LOCAL)
    assert (folder.is_file, folder.path) == (True, "/tmp/peers/p1")
    assert parse_location(folder.to_commitment(), LOCAL) == folder


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("x" * 600, "too_long"),
        ("https://example.com/bucket name", "bad_chars"),
        ("https://example.com/bücket", "bad_chars"),
        ("ftp://example.com/bucket", "bad_scheme"),
        ("gopher://example.com/bucket", "bad_scheme"),
        ("file:///tmp/x", "bad_scheme"),  # not allowed by the default policy
        ("http://example.com/bucket", "insecure"),
        ("https://127.0.0.1/bucket", "private_host"),
        ("https://169.254.169.254/bucket", "private_host"),
        ("https://10.1.2.3:9000/bucket", "private_host"),
        ("https://localhost/bucket", "private_host"),
        ("https://2130706433/bucket", "bad_host"),
        ("https://127.1/bucket", "bad_host"),
        ("https://0177.0.0.1/bucket", "bad_host"),
        ("https://[::1]/bucket", "bad_host"),
        ("https://exa_mple.com/bucket", "bad_host"),
        ("https://example.com:99999/bucket", "bad_url"),
        ("https://example.com/bucket#frag", "bad_url"),
        ("https://example.com/", "bad_bucket"),
        ("https://example.com/Bucket", "bad_bucket"),
        ("https://example.com/bucket/sub/path", "bad_bucket"),
        ("https://example.com/a..b", "bad_bucket"),
        ("https://:secret@example.com/bucket", "bad_credentials"),
        ("https://key:@example.com/bucket", "bad_credentials"),
        ("https://example.com/bucket?region=auto&x=1", "bad_query"),
        ("https://example.com/bucket?endpoint=evil", "bad_query"),
    ],
)
def test_garbage_is_rejected_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(LocationError) as info:
        parse_location(text)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    "text", ["file://host/tmp/x", "file:///tmp/../etc", "file:///tmp//x", "file:///tmp/x?y=1", "file://"]
)
def test_file_paths_must_be_plain_absolute(text: str) -> None:
    with pytest.raises(LocationError) as info:
        parse_location(text, LOCAL)
    assert info.value.reason == "bad_path"


def test_parse_commitments_splits_good_and_bad() -> None:
    good, bad = parse_commitments({"a": "https://example.com/bucket-a", "b": "garbage", "c": ""})
    assert list(good) == ["a"]
    assert {k: e.reason for k, e in bad.items()} == {"b": "bad_scheme", "c": "empty"}
