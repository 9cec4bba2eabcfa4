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
