"""The demo and the commands an operator runs after it, as a new operator would run them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api_fixtures import free_port
from tests.cli_fixtures import DEMO_ARGS, GAUNTLET, DemoRun, assert_one_line, call, gauntlet
from validator.state.workdir_lock import held_workdir


@pytest.fixture
def demo_dir(readme_demo: DemoRun) -> Path:
    """The session's run of the README's demo command (two committed windows, a relative --workdir).
    Tests that run commands in it work on a copy."""
    return readme_demo.workdir


def test_replay_from_another_folder(
    demo_dir: Path, tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = (demo_dir / "gauntlet.toml").read_text()
    assert f'workdir = "{demo_dir}"' in toml and f'dataset_path = "{demo_dir / "corpus"}"' in toml
    clean_env.chdir(tmp_path)  # not the folder the demo ran in
    clean_env.setenv("GAUNTLET_CONFIG", str(demo_dir / "gauntlet.toml"))
    result = call(["replay", "1", "--json"], capsys)
    assert result.code == 0, result.err
    assert json.loads(result.out)["identical"] is True


def test_replay_under_other_settings_says_so(
    demo_dir: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Differences from changed rules looked exactly like nondeterminism: replay never compared the
    settings digest stored with the window."""
    clean_env.setenv("GAUNTLET_CONFIG", str(demo_dir / "gauntlet.toml"))
    same = call(["replay", "1", "--json"], capsys)
    assert same.code == 0 and "another" not in same.err
    rules = json.loads(same.out)["rules"]
    assert rules["config digest"][0] == rules["config digest"][1]
    clean_env.setenv("GAUNTLET_EVAL_LR_FACTOR", "0.09")
    changed = call(["replay", "1"], capsys)
    assert "window 1 was scored under another config digest" in changed.err, changed.err


def test_replay_over_another_corpus_says_so(
    demo_dir: Path, tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dataset_path` is a path: a rebuilt corpus changed every score and replay gave no reason."""
    corpus = tmp_path / "corpus"
    shutil.copytree(demo_dir / "corpus", corpus)
    manifest = json.loads((corpus / "manifest.json").read_text())
    manifest["shards"][0]["sha256"] = "0" * 64  # another build of the corpus
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    clean_env.setenv("GAUNTLET_CONFIG", str(demo_dir / "gauntlet.toml"))
    clean_env.setenv("GAUNTLET_DATASET_PATH", str(corpus))
    result = call(["replay", "1"], capsys)
    assert "window 1 was scored under another config digest" in result.err, result.err


def test_the_demo_writes_its_shapes_for_inspect(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shapes = demo_dir / "shapes.json"
    files = sorted((demo_dir / "stores").glob("peer-*/gauntlet/1/1/*.safetensors"))
    assert shapes.is_file() and files
    result = call(["submission", "inspect", str(files[0]), "--shapes", str(shapes)], capsys)
    assert result.code == 0 and json.loads(result.out)["ok"] is True


def test_rerun_says_it_resumes_and_fresh_starts_over(demo_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "copy"
    shutil.copytree(demo_dir, work)
    resumed = gauntlet(["demo", "--windows", "1", "--workdir", str(work), *DEMO_ARGS], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stderr and "window 2 (resumed)" in resumed.stderr
    assert "window 0 (initial)" not in resumed.stderr
    assert [w["window"] for w in json.loads(resumed.stdout.splitlines()[-1])["windows"]] == [3]
    fresh = gauntlet(["demo", "--windows", "1", "--workdir", str(work), "--fresh", *DEMO_ARGS], tmp_path)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert "window 0 (initial)" in fresh.stderr and "resuming" not in fresh.stderr
    assert [w["window"] for w in json.loads(fresh.stdout.splitlines()[-1])["windows"]] == [1]


@pytest.mark.parametrize("lost", ["files", "rows"])
def test_run_without_checkpoints_is_one_line(
    lost: str,
    demo_dir: Path,
    tmp_path: Path,
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A database newer than its work folder (deploy/README.md §5): the checkpoint files are gone,
    or the database names none at or before the window to resume."""
    work = tmp_path / "restored"
    shutil.copytree(demo_dir, work)
    if lost == "files":
        shutil.rmtree(work / "blobs")
    else:
        with sqlite3.connect(work / "gauntlet.db") as db:
            db.execute("DELETE FROM checkpoints")
    clean_env.setenv("GAUNTLET_CONFIG", str(work / "gauntlet.toml"))
    clean_env.setenv("GAUNTLET_WORKDIR", str(work))
    clean_env.setenv("GAUNTLET_DATABASE_URL", f"sqlite:///{work / 'gauntlet.db'}")
    clean_env.setenv("GAUNTLET_REDIS_URL", "")
    result = call(["run", "--windows", "1"], capsys)
    if lost == "files":
        assert_one_line(result, 1, "checkpoint checkpoints/", "is missing from", str(work / "blobs"))
    else:
        assert_one_line(result, 1, "no checkpoint at or before window 3", str(work))


def test_run_logs_a_startup_line(demo_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "again"
    shutil.copytree(demo_dir, work)
    env = {"GAUNTLET_CONFIG": str(work / "gauntlet.toml"), "GAUNTLET_WORKDIR": str(work),
           "GAUNTLET_DATABASE_URL": f"sqlite:///{work / 'gauntlet.db'}", "GAUNTLET_REDIS_URL": "",
           "GAUNTLET_METRICS_PORT": str(free_port())}  # fmt: skip
    result = gauntlet(["run", "--windows", "0"], tmp_path, **env)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in result.stderr.splitlines() if '"startup"' in line]
    assert len(lines) == 1
    start = lines[0]
    assert start["command"] == "run" and start["chain"] == "local"
    assert start["device"] == "cpu" or start["device"].startswith("cuda")  # resolved, not "auto"
    assert start["hotkey"] and len(start["model"]) == 64 and start["database"].endswith("gauntlet.db")
    assert start["store"] == str(work / "blobs") and start["version"]


def test_a_second_run_on_one_work_folder_is_refused(demo_dir: Path, tmp_path: Path) -> None:
    """Two runs on one folder shared its checkpoints and spool and, with the host and folder as the
    leader lock's token, both set weights; the second now stops with one line, and a lock held by a
    process that ended (any way) is gone with it."""
    work = tmp_path / "shared"
    shutil.copytree(demo_dir, work)
    env = {
        "GAUNTLET_CONFIG": str(work / "gauntlet.toml"),
        "GAUNTLET_WORKDIR": str(work),
        "GAUNTLET_DATABASE_URL": f"sqlite:///{work / 'gauntlet.db'}",
        "GAUNTLET_REDIS_URL": "",
    }
    with held_workdir(work):  # the first validator
        refused = gauntlet(["run", "--windows", "0"], tmp_path, **env)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith("error: another gauntlet run holds")
    assert gauntlet(["run", "--windows", "0"], tmp_path, **env).returncode == 0  # released


def test_api_logs_a_startup_line(demo_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")}
    env = clean | {"GAUNTLET_CONFIG": str(demo_dir / "gauntlet.toml"), "GAUNTLET_REDIS_URL": ""}
    proc = subprocess.Popen(
        [GAUNTLET, "api", "--port", str(port)], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and '"startup"' not in line:
            line = proc.stderr.readline()
        start = json.loads(line)
        assert start["command"] == "api" and start["port"] == port and start["window"] == 2
        assert len(start["model"]) == 64
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # reaps it and closes the pipe


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_demo_on_a_port_in_use_stops_before_starting(
    busy_port: int, tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.chdir(tmp_path)
    result = call(["demo", "--port", str(busy_port), "--workdir", "w"], capsys)
    assert_one_line(result, 1, f"port {busy_port} is in use", "--port")
    assert not (tmp_path / "w").exists()  # nothing was started


def test_demo_usage_errors(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.chdir(tmp_path)
    args = ["demo", "--no-api", "--workdir", "w", "--peers"]
    assert_one_line(call([*args, "honest:x"], capsys), 1, "'--peers'", "'x'")
    assert_one_line(call([*args, "honest:100000"], capsys), 1, "'--peers'", "at most 255")
    assert_one_line(call([*args, "nosuch:1"], capsys), 1, "'--peers'", "nosuch")
    (tmp_path / "file").write_text("not a folder")
    blocked = call(["demo", "--no-api", "--workdir", str(tmp_path / "file" / "w")], capsys)
    assert_one_line(blocked, 1, "cannot create the work folder", "--workdir")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    refused = call(["demo", "--no-api", "--workdir", str(tmp_path / "mine"), "--fresh"], capsys)
    assert_one_line(refused, 1, "does not look like a demo work folder")
    assert (tmp_path / "mine" / "thesis.tex").exists()
    assert not (tmp_path / "w").exists()
