"""Operator mistakes end in one line naming the problem and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from storage import migrate
from tests.api_fixtures import free_port
from tests.cli_fixtures import Result, assert_one_line, call
from validator.wiring import code_version


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    result = call(["--version"], capsys)
    assert result.code == 0 and result.out.strip() == f"gauntlet {code_version()}"


def test_flags_are_shown_without_a_type(capsys: pytest.CaptureFixture[str]) -> None:
    result = call(["demo", "--help"], capsys)
    assert "--no-api" in result.out and "--fresh" in result.out
    assert "<bool>" not in result.out
    assert "<int" in result.out  # options that take a value still say which


def test_unknown_command_and_bad_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line(call(["nosuch"], capsys), 1, "nosuch", "(see 'gauntlet --help')")
    assert_one_line(call(["demo", "--windows", "0"], capsys), 1, "--windows")


def test_db_current_with_an_unreachable_database(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # nothing listens there
    clean_env.setenv("GAUNTLET_DATABASE_URL", f"postgresql+psycopg://postgres:hunter2@127.0.0.1:{port}/x")
    result = call(["db", "current"], capsys)
    assert_one_line(result, 1, "cannot reach the database", str(port))
    assert "hunter2" not in result.err  # the password stays masked


def test_db_upgrade_to_an_unknown_revision(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("GAUNTLET_DATABASE_URL", f"sqlite:///{tmp_path / 'v.db'}")
    assert_one_line(call(["db", "upgrade", "bogusrev"], capsys), 1, "'bogusrev'", migrate.head())


def test_db_current_without_configuration_creates_no_database(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.chdir(tmp_path)
    result = call(["db", "current"], capsys)
    assert_one_line(result, 1, "no database at", "GAUNTLET_DATABASE_URL")
    assert list(tmp_path.iterdir()) == []  # no gauntlet.db appeared in the current folder
    clean_env.setenv("GAUNTLET_DATABASE_URL", f"sqlite:///{tmp_path / 'made.db'}")
    assert call(["db", "upgrade"], capsys).code == 0
    made = call(["db", "current"], capsys)
    assert made.code == 0 and migrate.head() in made.out


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        ({}, ("GAUNTLET_DATASET_PATH is required", "GAUNTLET_CONFIG")),
        ({"GAUNTLET_DATASET_PATH": "{tmp}/absent"}, ("no dataset at", "absent", "gauntlet data build")),
        ({"GAUNTLET_DATASET_PATH": "{tmp}"}, ("manifest.json is missing",)),
    ],
    ids=["unset", "absent", "not-a-dataset"],
)
def test_run_with_a_missing_dataset(
    env: dict[str, str],
    fragments: tuple[str, ...],
    clean_env: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    clean_env.chdir(tmp_path)
    for key, value in env.items():
        clean_env.setenv(key, value.format(tmp=tmp_path))
    assert_one_line(call(["run", "--windows", "1"], capsys), 1, *fragments)


def test_run_with_a_missing_model_checkpoint(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scoring.corpus import generate_corpus

    generate_corpus(tmp_path / "corpus", seed=0, n_tokens=20_000, shard_tokens=10_000)
    clean_env.chdir(tmp_path)
    clean_env.setenv("GAUNTLET_DATASET_PATH", str(tmp_path / "corpus"))
    clean_env.setenv("GAUNTLET_MODEL_PATH", str(tmp_path / "model"))
    assert_one_line(call(["run", "--windows", "1"], capsys), 1, "no checkpoint at", "GAUNTLET_MODEL_PATH")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"hidden_size": 8}')
    assert_one_line(call(["run", "--windows", "1"], capsys), 1, "cannot load the checkpoint", "KeyError")


def test_invalid_configuration_is_one_line_naming_each_field(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("GAUNTLET_NETUID", "-1")
    clean_env.setenv("GAUNTLET_SEQ_LEN", "many")
    assert_one_line(call(["config", "show"], capsys), 1, "invalid configuration", "netuid", "seq_len")
    clean_env.delenv("GAUNTLET_NETUID")
    clean_env.delenv("GAUNTLET_SEQ_LEN")
    clean_env.setenv("GAUNTLET_CONFIG", str(tmp_path / "absent.toml"))
    assert_one_line(call(["config", "show"], capsys), 1, "GAUNTLET_CONFIG", "absent.toml")


def test_db_downgrade_rolls_back_and_refuses_an_unknown_revision(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("GAUNTLET_DATABASE_URL", f"sqlite:///{tmp_path / 'v.db'}")
    assert call(["db", "upgrade"], capsys).code == 0
    down = call(["db", "downgrade", "--", "-1"], capsys)  # "--": -1 is a revision, not an option
    assert down.code == 0, down.err
    revision = json.loads(down.out)["revision"]
    assert revision != migrate.head()
    assert_one_line(call(["db", "downgrade", "bogusrev"], capsys), 1, "'bogusrev'")
    assert json.loads(call(["db", "upgrade"], capsys).out)["revision"] == migrate.head()


def test_replay_without_configuration_or_window(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scoring.corpus import generate_corpus

    clean_env.chdir(tmp_path)
    assert_one_line(call(["replay", "3"], capsys), 1, "no database at")
    assert list(tmp_path.iterdir()) == []
    generate_corpus(tmp_path / "corpus", seed=0, n_tokens=20_000, shard_tokens=10_000)
    clean_env.setenv("GAUNTLET_DATASET_PATH", str(tmp_path / "corpus"))
    clean_env.setenv("GAUNTLET_DATABASE_URL", f"sqlite:///{tmp_path / 'v.db'}")
    assert call(["db", "upgrade"], capsys).code == 0
    assert_one_line(call(["replay", "3"], capsys), 1, "window 3 is not committed")


def test_api_on_a_port_in_use(clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert_one_line(call(["api", "--port", str(port)], capsys), 1, f"port {port}", "in use")


def test_run_with_a_missing_wallet_or_an_unreachable_chain(tmp_path: Path) -> None:
    """In a child process: the SDK leaves an event loop behind, which warnings-as-errors would blame
    on the test rather than on the one line under test."""
    import bittensor as bt

    from scoring.corpus import generate_corpus

    generate_corpus(tmp_path / "corpus", seed=0, n_tokens=20_000, shard_tokens=10_000)
    port = free_port()  # nothing answers there
    env = {"CHAIN": "subtensor", "NETWORK": f"ws://127.0.0.1:{port}", "VALIDATOR_SECRET": "s" * 32,
           "STORAGE_HOST_SUFFIXES": '["example.com"]', "DATASET_PATH": str(tmp_path / "corpus"),
           "WALLET_PATH": str(tmp_path / "wallets"), "WALLET_NAME": "v", "WALLET_HOTKEY": "hot"}  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")} | {
        "HOME": str(tmp_path),
        **{f"GAUNTLET_{k}": v for k, v in env.items()},  # SDK caches go under ~
    }

    def run() -> Result:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "gauntlet"), "run", "--windows", "0"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip
        return Result(done.returncode, done.stdout, done.stderr)

    assert_one_line(run(), 1, "cannot open the validator's hotkey", "hot")
    wallet = bt.Wallet("v", "hot", path=str(tmp_path / "wallets"))
    wallet.regenerate_hotkey(seed="0x" + "11" * 32, use_password=False, overwrite=True, suppress=True)
    unreachable = run()
    # the SDK logs its own "Could not connect" line first; ours ends the output, with no traceback
    assert unreachable.code == 1 and "Traceback" not in unreachable.err
    last = unreachable.err_lines[-1]
    assert last.startswith("error: cannot reach the chain") and str(port) in last
