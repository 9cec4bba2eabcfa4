"""The `gauntlet` command as users call it: exit codes, JSON outputs, the demo's closing line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_fixtures import call
from tests.codec_fixtures import SPEC, make_file
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({k: list(v) for k, v in SPEC.items()}))
    return path


def test_inspect_accepts_a_good_file_and_writes_the_dense_update(
    tmp_path: Path, shapes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sub = tmp_path / "sub.safetensors"
    sub.write_bytes(make_file(3))
    dense = tmp_path / "dense.safetensors"
    code, out, _ = call(
        ["submission", "inspect", str(sub), "--shapes", str(shapes), "--dense", str(dense)], capsys
    )
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["reason"] is None
    assert report["params"] == sum(math.prod(s) for s in SPEC.values())
    assert report["bytes"] == sub.stat().st_size and report["window"] == 7 and report["uid"] == 3
    from safetensors.torch import load_file

    tensors = load_file(str(dense))
    assert set(tensors) == set(SPEC) and tuple(tensors["embed.weight"].shape) == SPEC["embed.weight"]


def test_inspect_rejects_with_exit_2_and_a_reason(
    tmp_path: Path, shapes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sub = tmp_path / "sub.safetensors"
    sub.write_bytes(make_file(3)[:-10])
    code, out, _ = call(["submission", "inspect", str(sub), "--shapes", str(shapes)], capsys)
    assert code == 2 and json.loads(out)["reason"] == "not_safetensors"
    sub.write_bytes(make_file(3))
    code, out, _ = call(
        ["submission", "inspect", str(sub), "--shapes", str(shapes), "--base", "cd" * 32], capsys
    )
    assert code == 2 and json.loads(out)["reason"] == "stale_base"


def test_usage_errors_exit_1(tmp_path: Path, shapes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert call(["submission", "inspect", str(tmp_path / "absent"), "--shapes", str(shapes)], capsys)[0] == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"w": "not a shape"}')
    sub = tmp_path / "sub.safetensors"
    sub.write_bytes(make_file(0))
    assert call(["submission", "inspect", str(sub), "--shapes", str(bad)], capsys)[0] == 1


def test_sample_encodes_and_inspects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = call(["submission", "sample", "--workdir", str(tmp_path)], capsys)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and lines[-1]["ok"] is True and lines[-1]["ratio_vs_fp32"] > 100


@pytest.fixture(params=["sqlite", "postgresql"])
def database_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The demo's own SQLite file, or a throwaway Postgres database via GAUNTLET_DATABASE_URL."""
    if request.param == "sqlite":
        yield {}
        return
    name = create_pg_database()
    try:
        yield {"GAUNTLET_DATABASE_URL": PG_URL.format(name=name)}
    finally:
        drop_pg_database(name)


def test_the_readme_demo_command_ends_with_its_json_summary(
    tmp_path: Path, database_env: dict[str, str]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")} | database_env
    result = subprocess.run(
        [str(Path(sys.executable).parent / "gauntlet"), "demo", "--no-api", "--json", "--windows", "2",
         "--peers", "honest:2,malformed:1", "--inner-steps", "3", "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert [w["window"] for w in summary["windows"]] == [1, 2]
    assert {p["behaviour"] for p in summary["peers"]} == {"honest", "malformed"}
    statuses = summary["windows"][-1]["statuses"]
    assert sorted(statuses.values()) == ["invalid", "ok", "ok"]
    assert "held-out loss" in result.stderr
    replay = subprocess.run(
        [str(Path(sys.executable).parent / "gauntlet"), "replay", "2", "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
        env=env | {"GAUNTLET_CONFIG": str(tmp_path / "demo" / "gauntlet.toml")},
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr[-2000:] + replay.stdout[-2000:]
    assert json.loads(replay.stdout)["identical"] is True
