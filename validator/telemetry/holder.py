"""Who a leader is: the work folder's id, and the process's incarnation of it.

The id is random and written once in the work folder, so a restarted process is recognised as the
same validator. Each process adds its own incarnation (`<id>.<random>`): with the id alone, a host
started from a copy of another's work folder (a cloned disk, a copied volume) held the same name,
and both took the leader lock as its holder, each renewing it every window. A lock held by another
incarnation of the same id is taken over only once it has gone unrenewed for half its TTL
(storage/leases.py, validator/telemetry/events.py), so a crashed predecessor yields in about one
and a half windows and a live copy never does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

HOLDER_FILE = "leader-id"
SHARED = (
    "another process with this work folder's leader id holds the lock: a crashed predecessor (taken "
    "over once unrenewed for half its TTL) or a host started from a copy of this work folder (delete "
    "its leader-id file)"
)


def holder_id(workdir: Path) -> str:
    """This work folder's name as a leader: random, written once. A hash of the host name and the
    folder's path named two hosts with the same name (a cloud image's default, a container's fixed
    `hostname:`) and the documented folder alike, and both led; and a container re-created under a
    new host name stayed a follower of its own earlier lease for three windows."""
    path = Path(workdir) / HOLDER_FILE
    try:
        return uuid.UUID(hex=path.read_text().strip()).hex  # damaged (ValueError): a new id
    except (FileNotFoundError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    tmp = path.with_name(f".{HOLDER_FILE}.{token}")
    tmp.write_text(token + "\n")
    tmp.replace(path)  # the work folder's lock keeps a second process out; a rename is whole or absent
    return token


# this process's incarnation: one for the process's life, so that a round rebuilt after a failure
# (a new lock object) renews its own lock instead of waiting on itself as on a crashed predecessor
PROCESS = uuid.uuid4().hex[:16]


@dataclass(frozen=True, slots=True)
class Holder:
    """A lock holder: the work folder's id (`holder_id`) and the process's incarnation."""

    id: str
    process: str = PROCESS

    @property
    def token(self) -> str:
        """The name a lock stores: `<id>.<process>`."""
        return f"{self.id}.{self.process}"


def is_kin(stored: str, holder: str) -> bool:
    """`stored` names `holder` (from before incarnations) or one of its incarnations."""
    return stored == holder or stored.startswith(f"{holder}.")
