"""The `gauntlet` command as users call it: exit codes, JSON outputs, the demo's closing line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.cli_fixtures import DEMO_ARGS, DemoRun, call, gauntlet
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


def check_readme_demo(run: DemoRun, **env: str) -> None:
    """The demo's closing JSON summary, then `gauntlet replay` of its last window: identical."""
    assert run.result.returncode == 0, run.result.stderr[-2000:]
    summary = json.loads(run.result.stdout.strip().splitlines()[-1])
    assert [w["window"] for w in summary["windows"]] == [1, 2]
    assert {p["behaviour"] for p in summary["peers"]} == {"honest", "malformed"}
    statuses = summary["windows"][-1]["statuses"]
    assert sorted(statuses.values()) == ["invalid", "ok", "ok"]
    assert "held-out loss" in run.result.stderr
    config = str(run.workdir / "gauntlet.toml")
    replay = gauntlet(["replay", "2", "--json"], run.workdir.parent, GAUNTLET_CONFIG=config, **env)
    assert replay.returncode == 0, replay.stderr[-2000:] + replay.stdout[-2000:]
    assert json.loads(replay.stdout)["identical"] is True


def test_the_readme_demo_command_ends_with_its_json_summary(readme_demo: DemoRun) -> None:
    """On the demo's own SQLite file: the session's run of the README command."""
    check_readme_demo(readme_demo)


def test_the_readme_demo_command_on_postgres(tmp_path: Path) -> None:
    """The same command with a throwaway Postgres database via GAUNTLET_DATABASE_URL."""
    name = create_pg_database()
    try:
        env = {"GAUNTLET_DATABASE_URL": PG_URL.format(name=name)}
        result = gauntlet(["demo", "--windows", "2", *DEMO_ARGS, "--workdir", "demo"], tmp_path, **env)
        check_readme_demo(DemoRun(tmp_path / "demo", result), **env)
    finally:
        drop_pg_database(name)
