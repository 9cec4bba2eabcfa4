"""Plain frozen values the validator writes and the API reads (no SQLAlchemy rows leave storage).

Sequences passed in are normalised to tuples, so a record read back compares equal to the one written.
Timestamps are timezone-aware UTC; JSON mappings hold only JSON values (floats round-trip exactly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Final

from storage.fields import DETAIL_CHARS, KEY_CHARS, TAG_CHARS, bigint, check_window, clean, freeze
from storage.sketch_rows import SketchRecord

# The values of scoring.ranking.Status that are recorded (storage does not import scoring;
# tests/test_storage_vocabulary.py checks that the two agree).
SUBMISSION_STATUSES: Final = frozenset({"ok", "missing", "early", "late", "invalid"})
# Tuples, in the order the schema's check constraints list them (storage/models.py).
SELECTION_ROLES: Final = ("gather", "reserve")
OPEN: Final = "open"
COMMITTED: Final = "committed"
WINDOW_STATES: Final = (OPEN, "scored", COMMITTED)
# A window's `timings` entry on its evaluation workers (validator/workers/stats.py writes it)
WORKER_TIMINGS: Final = "evaluation_workers"
WEIGHT_OUTCOMES: Final = frozenset({"ok", "failed", "skipped", "withheld"})

JsonMap = Mapping[str, Any]


def ordinal(mu: float, sigma: float) -> float:
    """mu − 3 sigma (scoring.ranking.PeerRating.ordinal): ranks ties on final score; the API's `ordinal`."""
    return mu - 3 * sigma


@dataclass(frozen=True, slots=True)
class SubmissionRecord:
    """What was fetched for one peer in one window, and the verdict on it."""

    hotkey: str
    uid: int
    status: str
    reason: str | None = None
    detail: str = ""
    object_key: str | None = None
    etag: str | None = None
    version_id: str | None = None
    size: int | None = None
    payload_digest: str | None = None
    content_digest: str | None = None  # SHA-256 of the raw bytes: the archive key
    decoded_digest: str | None = None  # of the decoded values, however encoded (scoring/decoded_digest.py)
    storage_time: datetime | None = None
    fetched_time: datetime | None = None
    # The validator's own first sight of the object (seconds) and how long before it the upload may
    # have happened (None: unbounded). They decide who copied whom, so replay needs them exactly.
    first_seen: float | None = None
    seen_resolution_s: float | None = None
    # The decoded update's total norm, and its median per-parameter norm ÷ the window's clip reference
    # (scoring/clipping.py `inflation`): above `max_inflation` it is not aggregated. None: no valid update.
    norm: float | None = None
    inflation: float | None = None

    def __post_init__(self) -> None:
        if self.status not in SUBMISSION_STATUSES:
            raise ValueError(f"unknown submission status {self.status!r}")
        if self.status != "ok" and self.reason is None:
            raise ValueError("a submission that is not ok needs a reason code")
        clean(self, detail=DETAIL_CHARS, object_key=KEY_CHARS, etag=TAG_CHARS, version_id=TAG_CHARS)
        object.__setattr__(self, "size", bigint(self.size))


@dataclass(frozen=True, slots=True)
class EvaluationRecord:
    """One LossScore evaluation (DESIGN.md §6)."""

    hotkey: str
    loss_own_before: float
    loss_own_after: float
    loss_rand_before: float
    loss_rand_after: float
    score: float
    own_gain: float
    indicator: int
    timings: JsonMap = field(default_factory=dict)
    loss_rand_step: float | None = None  # held-out loss at the probe step (none before 20261201_0006)
    pages: JsonMap | None = None  # per-page losses (scoring/page_test.py; none before 20261202_0008)

    def __post_init__(self) -> None:
        if self.indicator not in (-1, 1):
            raise ValueError(f"indicator must be -1 or +1, got {self.indicator}")

    @classmethod
    def of(cls, hotkey: str, result: object, timings: JsonMap, pages: JsonMap | None) -> EvaluationRecord:
        """The record of a result with these fields' names (scoring.loss_score.PeerEval), its timings
        and per-page losses as JSON: the measured fields are named once, here."""
        names = [f.name for f in fields(cls) if f.name not in ("hotkey", "timings", "pages")]
        return cls(hotkey=hotkey, timings=timings, pages=pages, **{n: getattr(result, n) for n in names})


@dataclass(frozen=True, slots=True)
class RatingRecord:
    """A peer's rating as of one window; `state` is the full serialized state replay reloads."""

    hotkey: str
    uid: int
    mu: float
    sigma: float
    bma: float
    final_score: float
    penalty: JsonMap = field(default_factory=dict)
    last_evaluated_window: int | None = None
    state: JsonMap = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {self.sigma}")

    @property
    def ordinal(self) -> float:
        return ordinal(self.mu, self.sigma)


@dataclass(frozen=True, slots=True)
class PenaltyRecord:
    """One penalty applied in a window (missing, invalid, copy, inactive, ban)."""

    hotkey: str
    kind: str
    multiplier: float
    detail: str = ""
    until_window: int | None = None

    def __post_init__(self) -> None:  # a detail quotes what a peer sent (storage/fields.py)
        clean(self, detail=DETAIL_CHARS)


@dataclass(frozen=True, slots=True)
class CopyPairRecord:
    """A flagged pair; `offender` is the later uploader. With the upload order unclear (`clear` False)
    nobody was penalised and only one of the two was aggregated."""

    hotkey_a: str
    hotkey_b: str
    overlap: float
    sign_agreement: float
    offender: str
    similarity: float = 1.0  # residual similarity beyond the window's consensus (scoring/similarity.py)
    baseline: float = 0.0  # the window's typical overlap the pair's excess was measured from
    clear: bool = True
    # a's authorship against b (b's update on a's pages) and b's against a (scoring/authorship.py);
    # None: one payload (each side's own page test decided), or not measured
    authorship_a: float | None = None
    authorship_b: float | None = None

    def __post_init__(self) -> None:
        if self.offender not in (self.hotkey_a, self.hotkey_b):
            raise ValueError("the offender must be one of the pair")


@dataclass(frozen=True, slots=True)
class SelectionRecord:
    """A peer chosen for aggregation: role `gather` or `reserve`, rank from 0."""

    hotkey: str
    uid: int
    role: str
    rank: int

    def __post_init__(self) -> None:
        if self.role not in SELECTION_ROLES:
            raise ValueError(f"unknown selection role {self.role!r}")
        if self.rank < 0:
            raise ValueError(f"rank must be >= 0, got {self.rank}")


NOT_LEADER = "not the leader"  # the error of a follower's skipped weight set: not an attempt


@dataclass(frozen=True, slots=True)
class WeightSetRecord:
    """One attempt to set weights on chain, successful or not."""

    window: int
    block: int | None
    uids: Sequence[int]
    weights: Sequence[float]
    outcome: str
    error: str | None = None

    def __post_init__(self) -> None:
        check_window(self.window)
        if self.outcome not in WEIGHT_OUTCOMES:
            raise ValueError(f"unknown weight-set outcome {self.outcome!r}")
        if len(self.uids) != len(self.weights):
            raise ValueError("uids and weights must have the same length")
        freeze(self, "uids", "weights")


@dataclass(frozen=True, slots=True)
class WindowRecord:
    """Everything the validator decided for one window; committed in one transaction."""

    window: int
    base_fingerprint: str
    heldout_seed: str
    config_digest: str
    code_version: str
    start_block: int | None = None
    timings: JsonMap = field(default_factory=dict)
    aggregate_digests: Sequence[str] = ()
    clip_reference: JsonMap = field(default_factory=dict)  # per-parameter norm each update is clipped to
    aggregate_weights: Sequence[float] = ()  # each aggregated update's coefficient; () equal weights
    salvaged: bool = False  # stages that raised were skipped (validator/service.py): not replayable
    submissions: Sequence[SubmissionRecord] = ()
    evaluations: Sequence[EvaluationRecord] = ()
    ratings: Sequence[RatingRecord] = ()
    penalties: Sequence[PenaltyRecord] = ()
    copy_pairs: Sequence[CopyPairRecord] = ()
    selections: Sequence[SelectionRecord] = ()
    sketches: Sequence[SketchRecord] = ()  # each compared peer's residual (scoring/persistence.py)

    def __post_init__(self) -> None:
        check_window(self.window)
        freeze(self, "aggregate_digests", "aggregate_weights", "submissions", "evaluations", "ratings")
        freeze(self, "penalties", "copy_pairs", "selections", "sketches")
        for name in ("submissions", "evaluations", "ratings", "selections"):
            hotkeys = [r.hotkey for r in getattr(self, name)]
            if len(hotkeys) != len(set(hotkeys)):
                raise ValueError(f"duplicate hotkey in {name}")


@dataclass(frozen=True, slots=True)
class WindowSummary:
    """A window's header as listed by the API."""

    window: int
    state: str
    base_fingerprint: str
    start_block: int | None
    committed_at: datetime | None
    n_submissions: int
    n_evaluations: int


@dataclass(frozen=True, slots=True)
class LeaderboardEntry:
    """One row of the leaderboard, ranked by final score (rank 1 is best)."""

    rank: int
    hotkey: str
    uid: int
    mu: float
    sigma: float
    bma: float
    final_score: float
    last_evaluated_window: int | None
    updated_window: int

    @property
    def ordinal(self) -> float:
        return ordinal(self.mu, self.sigma)


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """A peer's rating as committed for one window."""

    window: int
    uid: int
    mu: float
    sigma: float
    bma: float
    final_score: float

    @property
    def ordinal(self) -> float:
        return ordinal(self.mu, self.sigma)


@dataclass(frozen=True, slots=True)
class PeerSummary:
    """A peer's identity, uid history (uid, first window, last window) and current rating."""

    hotkey: str
    uid: int
    first_window: int
    last_window: int
    uid_history: tuple[tuple[int, int, int], ...]
    rating: RatingRecord | None


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """A stored model checkpoint: the global model at the start of `window`."""

    window: int
    key: str
    digest: str
    size: int
