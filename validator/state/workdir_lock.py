"""One `gauntlet run` per work folder.

Two validator processes on one work folder share its checkpoints, its spool and, through the same
host and folder, the leader lock's token, so both set weights; on one database the second also
scored each window again and carried ratings of its own forward. The lock is an advisory `flock`
on a file in the folder, held while the process lives: the kernel drops it when the process dies,
however it dies, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".gauntlet-run.lock"


class WorkdirBusy(RuntimeError):
    """Another process holds the work folder."""


@contextmanager
def held_workdir(workdir: Path) -> Iterator[None]:
    """The folder's lock, held while the block runs (WorkdirBusy at once if another holds it)."""
    fd = hold_workdir(workdir)
    try:
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def hold_workdir(workdir: Path) -> int:
    """Take the folder's lock; returns the descriptor that holds it (closing it releases it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    fd = os.open(workdir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise WorkdirBusy(f"another gauntlet run holds {workdir.resolve()}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for the operator
    return fd
