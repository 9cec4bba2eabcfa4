"""Relative paths in a TOML file resolve against the file's folder, not the current one."""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.settings import Settings


def test_relative_paths_in_toml_are_relative_to_the_file(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "gauntlet.toml").write_text(
        'workdir = "w"\ndataset_path = "../data/corpus"\ndatabase_url = "sqlite:///state/g.db"\n'
        'model_path = "/abs/model"\nwallet_path = "~/.bittensor/wallets"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clean_env.chdir(elsewhere)
    clean_env.setenv("GAUNTLET_CONFIG", "../conf/gauntlet.toml")
    s = Settings()
    assert s.workdir == conf.resolve() / "w"
    assert s.dataset_path == conf.resolve() / "../data/corpus"
    assert s.database_url == f"sqlite:///{conf.resolve() / 'state' / 'g.db'}"
    assert s.model_path == Path("/abs/model") and s.wallet_path == Path("~/.bittensor/wallets")
    # the environment keeps its usual meaning: relative to where the command runs
    clean_env.setenv("GAUNTLET_WORKDIR", "here")
    assert Settings().workdir == Path("here")


def test_temporary_files_go_under_the_workdir_unless_tmpdir_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart replays a window's aggregated submissions through temporary files, each up to the
    largest upload; /tmp is memory in the container deployment (deploy/compose.yaml)."""
    import tempfile

    from validator.cli.ops import scratch_in_workdir

    monkeypatch.setattr(tempfile, "tempdir", None)  # restored after the test
    monkeypatch.delenv("TMPDIR", raising=False)
    left = tmp_path / "work" / "tmp" / "gauntlet-replay-x"
    left.mkdir(parents=True)
    (left / "0.safetensors").write_bytes(b"x" * 10)  # what a killed run left
    folder = scratch_in_workdir(tmp_path / "work")
    assert folder == tmp_path / "work" / "tmp" and not left.exists()
    with tempfile.TemporaryDirectory(prefix="gauntlet-replay-") as made:
        assert Path(made).parent == folder
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "elsewhere"))
    (tmp_path / "elsewhere").mkdir()
    assert scratch_in_workdir(tmp_path / "other") == tmp_path / "elsewhere"
    assert not (tmp_path / "other").exists()
