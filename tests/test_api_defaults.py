"""The API's config and the process settings that build it (`gauntlet api`) default alike, so an API
started from ApiConfig alone (tests, benchmarks) limits and reports as the deployed one does."""

from __future__ import annotations

from dataclasses import fields

from api.settings import ApiConfig
from validator.settings import Settings

# Settings field -> the ApiConfig field validator/cli/api.py sets from it
SHARED = {"rate_limit_per_minute": "rate_limit_per_minute", "api_max_commit_age_s": "max_commit_age_s"}


def test_the_api_defaults_are_the_settings_defaults() -> None:
    api = {f.name: f.default for f in fields(ApiConfig)}
    from_settings = {a: Settings.model_fields[s].default for s, a in SHARED.items()}
    assert from_settings == {a: api[a] for a in SHARED.values()}
