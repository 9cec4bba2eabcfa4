"""A folder of this process's own for large temporary files, under the work folder.

A restart replays a window's aggregated submissions through files, the recycled-work check reads
earlier ones, and `gauntlet replay` spools a window's submissions: each file up to the largest
upload a peer may send. The system's temporary folder is often memory (the compose file mounts a
small tmpfs there), so they go under `GAUNTLET_WORKDIR/tmp` instead, one folder per process, held
by a lock for its lifetime: at start, folders whose lock is free (their process is gone, killed
mid-window) are removed, and a `gauntlet replay` beside a running validator touches nothing of it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import IO

LOCK = ".lock"
_YOUNG_S = 60.0  # a folder without its lock yet may be one another process is creating now


class Scratch:
    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        for old in root.iterdir():
            if old.is_dir() and not old.is_symlink() and _abandoned(old):
                shutil.rmtree(old, ignore_errors=True)
        self.path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root.resolve()))
        self._lock: IO[str] | None = open(self.path / LOCK, "w")  # noqa: SIM115  # held until close
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # held (locked) while the process lives, referenced or not; a normal end leaves nothing
        atexit.register(self.close)

    def close(self) -> None:
        if self._lock is not None:
            atexit.unregister(self.close)
            self._lock.close()
            self._lock = None
            shutil.rmtree(self.path, ignore_errors=True)


def _abandoned(folder: Path) -> bool:
    lock = folder / LOCK
    if not lock.exists():
        with contextlib.suppress(OSError):
            return time.time() - folder.stat().st_mtime > _YOUNG_S
        return False
    try:
        with open(lock) as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: nobody holds it
            return True
    except OSError:  # held by a live process (or unreadable: left alone)
        return False
