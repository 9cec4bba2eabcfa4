"""`gauntlet doctor` against a local configuration: real Postgres, real Redis, the local chain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from scoring.corpus import generate_corpus
from scoring.signing import dev_keypair
from storage import migrate
from tests.api_fixtures import free_port
from tests.cli_fixtures import call
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database
from validator.chain.local import LocalChain, LocalChainConfig
from validator.settings import Settings

CHECKS = ["database", "redis", "chain", "archive store", "selection store", "dataset", "model", "gpu"]


@pytest.fixture
def pg_url() -> Iterator[str]:
    name = create_pg_database()
    try:
        yield PG_URL.format(name=name)
    finally:
        drop_pg_database(name)


@pytest.fixture
def configured(tmp_path: Path, pg_url: str, clean_env: pytest.MonkeyPatch) -> Path:
    """What an operator sets up before `gauntlet run`: a migrated database, a dataset, the
    validator's hotkey registered with a permit, a selection bucket (a folder here)."""
    migrate.upgrade(pg_url)
    generate_corpus(tmp_path / "corpus", seed=0, n_tokens=20_000, shard_tokens=10_000)
    hotkey = dev_keypair(Settings.model_fields["local_validator_uri"].default).ss58_address
    chain = LocalChain(LocalChainConfig(tmp_path / "chain.sqlite", validator_hotkey=hotkey))
    chain.register(hotkey, uid=0, stake=1000.0, permit=True)
    env = {
        "WORKDIR": str(tmp_path),
        "DATABASE_URL": pg_url,
        "DATASET_PATH": str(tmp_path / "corpus"),
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "SELECTION_LOCATION": f"file://{tmp_path / 'sel'}",
    }
    for key, value in env.items():
        clean_env.setenv(f"GAUNTLET_{key}", value)
    clean_env.chdir(tmp_path)
    return tmp_path


def lines(out: str) -> dict[str, tuple[str, str]]:
    rows = [line.split(maxsplit=1) for line in out.splitlines()]
    parsed = {}
    for status, rest in rows:
        name = next(c for c in CHECKS if rest.startswith(c))
        parsed[name] = (status, rest[len(name) :].strip())
    return parsed


def test_a_good_configuration_passes(configured: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = call(["doctor"], capsys)
    assert result.code == 0, result.out
    found = lines(result.out)
    assert list(found) == CHECKS and len(result.out.splitlines()) == len(CHECKS)
    assert {name: s for name, (s, _) in found.items() if name != "gpu"} == dict.fromkeys(CHECKS[:-1], "ok")
    assert found["gpu"][0] in {"ok", "warn"}  # warn on a machine without CUDA
    assert "migrated to " + migrate.head() in found["database"][1]
    assert "uid 0" in found["chain"][1] and "validator permit" in found["chain"][1]
    assert "20000 tokens" in found["dataset"][1] and "fingerprint" in found["model"][1]
    assert not list((configured / "sel").iterdir())  # the write probe cleaned up after itself
    as_json = call(["doctor", "--json"], capsys)
    assert [json.loads(line)["name"] for line in as_json.out.splitlines()] == CHECKS


def test_each_broken_part_is_named_on_its_own_line(
    configured: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    unmigrated = create_pg_database()
    try:
        clean_env.setenv("GAUNTLET_DATABASE_URL", PG_URL.format(name=unmigrated))
        clean_env.setenv("GAUNTLET_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
        (configured / "chain.sqlite").unlink()
        chain = LocalChain(LocalChainConfig(configured / "chain.sqlite", validator_hotkey="x"))
        hotkey = dev_keypair(Settings.model_fields["local_validator_uri"].default).ss58_address
        chain.register(hotkey, uid=0, stake=1.0, permit=False)
        shard = configured / "corpus" / "shard_00000.npy"
        shard.write_bytes(shard.read_bytes()[:-2] + b"\x00\x01")
        result = call(["doctor"], capsys)
    finally:
        drop_pg_database(unmigrated)
    assert result.code == 1
    found = lines(result.out)
    assert list(found) == CHECKS  # every check still ran and printed its line
    failed = {name for name, (status, _) in found.items() if status == "FAIL"}
    assert failed == {"database", "redis", "chain", "dataset", "model"}
    assert "gauntlet db upgrade" in found["database"][1]
    assert "ConnectionError" in found["redis"][1]
    assert "no validator permit" in found["chain"][1]
    assert "shard_00000.npy" in found["dataset"][1]
    assert found["archive store"][0] == "ok"


def test_an_unregistered_hotkey_fails(
    configured: Path, capsys: pytest.CaptureFixture[str], clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("GAUNTLET_LOCAL_VALIDATOR_URI", "//someone-else")
    result = call(["doctor"], capsys)
    assert result.code == 1
    assert lines(result.out)["chain"][0] == "FAIL" and "is not registered" in result.out
