"""Large temporary files go to a locked folder of the process's own under the work folder
(validator/state/scratch.py): a restart clears what a killed process left, never what a live one
(a `gauntlet replay` beside the validator) is using."""

from __future__ import annotations

import os
import time
from pathlib import Path

from validator.state.scratch import LOCK, Scratch


def test_a_folder_of_its_own_is_made_and_held(tmp_path: Path) -> None:
    first = Scratch(tmp_path / "tmp")
    second = Scratch(tmp_path / "tmp")  # another process starting beside it
    try:
        assert first.path.parent == second.path.parent == (tmp_path / "tmp").resolve()
        assert first.path != second.path and first.path.is_dir() and second.path.is_dir()
        (first.path / "update.safetensors").write_bytes(b"x")
        third = Scratch(tmp_path / "tmp")
        assert (first.path / "update.safetensors").exists()  # a live process's files are kept
        third.close()
        assert not third.path.exists()
    finally:
        first.close()
        second.close()


def test_what_a_killed_process_left_is_removed_at_start(tmp_path: Path) -> None:
    root = tmp_path / "tmp"
    dead = root / "123-dead"
    dead.mkdir(parents=True)
    (dead / LOCK).touch()  # its lock, free: the process is gone
    (dead / "0.safetensors").write_bytes(b"x" * 100)
    old = root / "456-never-locked"
    old.mkdir()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    young = root / "789-starting"  # another process making its folder right now
    young.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").touch()
    (root / "link").symlink_to(elsewhere, target_is_directory=True)
    scratch = Scratch(root)
    try:
        assert not dead.exists() and not old.exists() and young.exists()
        assert (elsewhere / "keep").exists()  # a link is never followed
    finally:
        scratch.close()
