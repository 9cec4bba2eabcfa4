"""What the round loop knows about each peer in a window, filled in stage by stage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import structlog

from scoring.authorship import Readings
from scoring.loss_score import PeerEval
from scoring.page_test import own_t
from scoring.ranking import RatingState, Status
from scoring.selection import Selection
from scoring.types import Reason, SparseUpdate
from scoring.uniqueness import CopyFinding, CopyTier
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import FetchResult
from validator.workers.stats import WorkerStats

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class PeerTarget:
    """A registered peer and where it publishes (None with a reason when its commitment is unusable)."""

    uid: int
    hotkey: str
    location: StorageLocation | None
    problem: str = ""
    reason: str | None = None  # why there is nothing to fetch: no_location or bad_location


@dataclass(frozen=True, slots=True)
class PeerWindow:
    """One peer's window so far: with a reason unless its status is ok."""

    target: PeerTarget
    status: Status
    reason: str | None = None
    detail: str = ""
    fetch: FetchResult | None = None
    content_digest: str | None = None  # SHA-256 of the raw bytes: the archive key
    update: SparseUpdate | None = None
    copy_tier: CopyTier = CopyTier.NONE
    evaluation: PeerEval | None = None

    @property
    def hotkey(self) -> str:
        return self.target.hotkey

    @property
    def uid(self) -> int:
        return self.target.uid

    @property
    def valid(self) -> bool:
        return self.status == Status.OK and self.update is not None

    def reject(self, reason: str, detail: str) -> PeerWindow:
        """The same peer, now invalid; the decoded update is dropped so nothing downstream uses it."""
        return replace(self, status=Status.INVALID, reason=reason, detail=detail, update=None)


DECODE, NORM = "decode", "norm"  # the judging stages before the checks compare peers with each other


def judging_failed(p: PeerWindow, stage: str, error: BaseException) -> PeerWindow:
    """The peer whose judging raised: invalid (`internal_error`), the traceback in the log."""
    log.error("peer_judging_failed", stage=stage, hotkey=p.hotkey, uid=p.uid, exc_info=error)
    return p.reject(Reason.INTERNAL_ERROR, raised(stage, error))


def raised(stage: str, error: BaseException) -> str:
    """An `internal_error`'s stored detail: the stage that raised and the exception's type only
    (messages may quote what the peer sent). `raised_in` reads the stage back (replay)."""
    return f"{stage} raised {type(error).__name__}"


def raised_in(detail: str) -> str | None:
    """The stage an `internal_error` detail names, or None."""
    stage, sep, _ = detail.partition(" raised ")
    return stage if sep else None


@dataclass(frozen=True, slots=True)
class Scored:
    """A window scored from its inputs: what the round commits and replay compares."""

    peers: list[PeerWindow]
    findings: list[CopyFinding]
    reference: dict[str, float]  # the clip reference: per-parameter median norm
    ratings: RatingState  # after this window
    selection: Selection[str]
    heldout_loss: float  # the base model's loss on the held-out pages (NaN when not evaluated)
    eval_seconds: tuple[float, ...] = ()  # one per evaluated peer: sizes the next window's budget
    workers: tuple[WorkerStats, ...] = ()  # who evaluated: recorded with the timings, never replayed
    residuals: Mapping[str, bytes] = field(default_factory=dict)  # float16 sketches for later windows
    sketch_seed: int = 0  # the hash seed they were sketched with
    # flagged pairs' updates read on each other's pages (scoring/authorship.py): recorded per pair
    readings: Readings = field(default_factory=dict)


def page_tests(peers: Sequence[PeerWindow]) -> dict[str, float]:
    """Each valid evaluated peer's page test t this window (scoring/page_test.py)."""
    out = {}
    for p in peers:
        if p.valid and p.evaluation is not None and (t := own_t(p.evaluation.pages)) is not None:
            out[p.hotkey] = t
    return out
