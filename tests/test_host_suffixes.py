"""Trusted storage providers match on a label boundary: a look-alike domain is not a provider."""

from __future__ import annotations

import pytest

from validator.stores.commitments import LocationError, LocationPolicy, parse_location


@pytest.mark.parametrize("suffix", ["amazonaws.com", ".amazonaws.com", "AMAZONAWS.COM."])
def test_a_lookalike_domain_is_not_the_provider(suffix: str) -> None:
    policy = LocationPolicy(allowed_host_suffixes=(suffix,))
    for host in ("evilamazonaws.com", "amazonaws.com.evil.org", "xamazonaws.com"):
        with pytest.raises(LocationError) as e:
            parse_location(f"https://{host}/bucket", policy)
        assert e.value.reason == "host_not_allowed", host
    for host in ("b.s3.amazonaws.com", "s3.AmazonAWS.com"):
        assert parse_location(f"https://{host}/bucket", policy).host.lower().endswith("amazonaws.com")
