"""Response models: the API's public contract (OpenAPI). Built from storage records, never from rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["gather", "reserve"]  # storage.records.SELECTION_ROLES (tests/test_storage_vocabulary.py)


class Schema(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ErrorBody(Schema):
    code: str = Field(description="machine-readable error code, e.g. not_found, invalid_parameter")
    message: str


class ErrorResponse(Schema):
    error: ErrorBody


class PeerRow(Schema):
    rank: int = Field(description="1 is best: final score, last aggregated window, ordinal, uid (one rule)")
    uid: int
    hotkey: str
    mu: float
    sigma: float
    ordinal: float = Field(description="mu - 3 sigma")
    bma: float
    final_score: float
    last_status: str | None = Field(description="submission status in the newest committed window")
    last_evaluated_window: int | None
    updated_window: int
    label: str | None = Field(default=None, description="the peer's simulated behaviour (demo only)")


class PeerList(Schema):
    window: int | None = Field(description="newest committed window")
    total: int = Field(description="peers that pass the filters")
    offset: int
    limit: int
    peers: list[PeerRow]


class UidSpan(Schema):
    uid: int
    first_window: int
    last_window: int


class EvaluationOut(Schema):
    hotkey: str
    loss_own_before: float
    loss_own_after: float
    loss_rand_before: float
    loss_rand_after: float
    score: float
    own_gain: float
    indicator: int
    # the held-out loss with the update applied at the probe step (5 β), not just at β: its gain there
    # against β's, scaled, is the update's retention (scoring/loss_score.py); none before 2026-12-01
    loss_rand_step: float | None = None
    pages: dict[str, list[float | None]] | None = None  # own, held-out: losses before, after (page_test.py)


class PenaltyOut(Schema):
    hotkey: str
    kind: str
    multiplier: float
    detail: str
    until_window: int | None


class SelectionOut(Schema):
    hotkey: str
    uid: int
    role: Role
    rank: int


class RatingOut(Schema):
    hotkey: str
    uid: int
    mu: float
    sigma: float
    ordinal: float
    bma: float
    final_score: float
    penalty: dict[str, Any]
    last_evaluated_window: int | None
    evaluations: int = Field(0, description="windows in which the peer was evaluated")
    positives: int = Field(0, description="evaluations with indicator +1 or a margin within proof_tie of 0")
    mean_margin: float = Field(0.0, description="mean relative own-data margin: the proof of training")
    proof_z: float | None = Field(None, description="page test's discounted Stouffer sum; proven from 1.5")
    links: dict[str, float] = Field(
        default_factory=dict, description="per other hotkey, evidence that their updates keep resembling "
        "each other (a pair at or above the alarm, 0.08 by default, is aggregated at most once)",
    )  # fmt: skip
    claims: dict[str, float] = Field(
        default_factory=dict, description="per hotkey a copy finding tied it to: the mean over the windows "
        "they were tied of how far its claim to the update read under theirs (scoring/claims.py; at 1.0 "
        "and over it is left out)",
    )  # fmt: skip
    claim_windows: dict[str, int] = Field(
        default_factory=dict, description="per hotkey of claims: the windows its claim is the mean of (the "
        "plain mean of the first 8, then each later window weighs 1/8)",
    )  # fmt: skip
    retention: float | None = Field(
        None, description="average of the update's gain at 5 β ÷ its gain at β, each window relative to the "
        "median of the window's full-size updates and clipped to 1 ± 0.25 (the mean of its first four "
        "windows, then a moving average; not aggregated under min_retention, 0.93); none: never measured",
    )  # fmt: skip
    drift: float = Field(0.0, description="CUSUM of drift_similarity (persistence_gate: out at 0.008)")
    drift_similarity: float | None = Field(None, description="mean residual cosine, 3-12 windows back")
    last_aggregated: int | None = Field(None, description="the last window that aggregated it")
    last_matched: int | None = Field(
        None, description="the last window it played the rating match in: a peer that has not proven its "
        "training, or whose gain overstates its work (inflated, under min_retention, linked, drifting), is "
        "rated on its own evidence only",
    )  # fmt: skip


class PeerWindow(Schema):
    window: int
    state: str
    status: str | None
    reason: str | None
    detail: str
    evaluation: EvaluationOut | None
    rating: RatingOut | None
    penalties: list[PenaltyOut]
    selection: SelectionOut | None


class PeerDetail(Schema):
    hotkey: str
    uid: int
    rank: int | None = Field(description="None: not in the newest rating state (it left, or lost its uid)")
    first_window: int
    last_window: int
    uid_history: list[UidSpan]
    rating: RatingOut | None
    windows: list[PeerWindow] = Field(description="the peer's newest windows, newest first")


class HistoryPointOut(Schema):
    window: int
    uid: int
    mu: float
    sigma: float
    ordinal: float
    bma: float
    final_score: float


class PeerHistory(Schema):
    hotkey: str
    from_window: int | None
    to_window: int | None
    points: list[HistoryPointOut] = Field(description="oldest first")


class WindowSummaryOut(Schema):
    window: int
    state: str
    base_fingerprint: str
    start_block: int | None
    committed_at: datetime | None
    n_submissions: int
    n_evaluations: int


class WindowList(Schema):
    windows: list[WindowSummaryOut] = Field(description="newest first")
    next_before: int | None = Field(description="pass as `before` for the next page; null at the end")


class SubmissionOut(Schema):
    hotkey: str
    uid: int
    status: str
    reason: str | None
    detail: str
    object_key: str | None
    etag: str | None
    version_id: str | None
    size: int | None
    payload_digest: str | None
    decoded_digest: str | None = Field(default=None, description="of its decoded values, however encoded")
    storage_time: datetime | None
    fetched_time: datetime | None
    norm: float | None = Field(default=None, description="the decoded update's total norm (valid updates)")
    inflation: float | None = Field(
        default=None, description="the update's median per-parameter norm ÷ the window's clip reference: "
        "past max_inflation (1.25) × the window's honest band it is evaluated, not aggregated",
    )  # fmt: skip


class CopyPairOut(Schema):
    hotkey_a: str
    hotkey_b: str
    overlap: float = Field(description="exact for the finding that rejected its offender, else sampled")
    sign_agreement: float
    offender: str
    similarity: float = Field(description="residual similarity beyond the window's consensus update (under "
        "0.1: a closest pair whose readings say one update holds the other's training)")  # fmt: skip
    baseline: float = Field(description="the window's typical overlap the pair's excess is measured from")
    clear: bool = Field(description="false: upload order unclear, nobody penalised, one aggregated")
    authorship_a: float | None = Field(None, description="page t on a's pages of b's update (null: not read)")
    authorship_b: float | None = Field(None, description="page t on b's pages of a's update (null: not read)")


class WeightSetOut(Schema):
    window: int
    block: int | None
    uids: list[int]
    weights: list[float]
    outcome: str
    error: str | None


class WorkerOut(Schema):
    name: str = Field(description="w0, w1, ... on Ray; local: a replica in-process; in-process: no pool")
    host: str = Field(description="the host it ran on ('' when unknown)")
    pid: int | None
    device: str = Field(description="e.g. cpu, cuda:0 ('' when unknown)")
    peers: int = Field(description="peers it evaluated in the window")
    seconds_per_peer: float | None = Field(description="mean LossScore seconds; null with no peers")
    failures: int = Field(description="jobs that raised, and times the worker died, hung or was rebuilt")


class WorkersNow(Schema):
    window: int | None = Field(description="the newest committed window; null before the first")
    workers: list[WorkerOut] = Field(description="who evaluated its peers; empty if none was recorded")


class WindowDetail(Schema):
    summary: WindowSummaryOut
    heldout_seed: str
    config_digest: str
    code_version: str
    timings: dict[str, Any] = Field(description="seconds per stage")
    workers: list[WorkerOut] = Field(description="the evaluation workers and what each did")
    aggregate_digests: list[str]
    submissions: list[SubmissionOut]
    evaluations: list[EvaluationOut]
    ratings: list[RatingOut]
    penalties: list[PenaltyOut]
    copy_pairs: list[CopyPairOut]
    selection: list[SelectionOut]
    weight_sets: list[WeightSetOut] = Field(description="weight-setting attempts recorded for this window")


class SelectedPeer(Schema):
    hotkey: str
    uid: int
    role: Role
    rank: int
    weight: float | None = Field(None, description="its coefficient in the outer step (none: equal weights)")
    object_key: str | None
    etag: str | None
    version_id: str | None
    payload_digest: str | None


class WindowSelection(Schema):
    window: int
    state: str
    base_fingerprint: str
    aggregate_digests: list[str]
    clip_reference: dict[str, float] = Field(description="per-parameter norm a gathered update is clipped to")
    peers: list[SelectedPeer] = Field(description="gather peers by rank, then reserves by rank")


class WeightList(Schema):
    weight_sets: list[WeightSetOut] = Field(description="weight-setting attempts, newest first")
    next_before: int | None = Field(description="pass as `before` for older attempts; null at the end")


class WindowTrendOut(Schema):
    window: int
    committed_at: datetime | None
    heldout_loss: float | None = Field(description="the global model's held-out loss before its step")
    statuses: dict[str, int] = Field(description="peers by submission status")
    timings: dict[str, float] = Field(description="seconds per stage")
    n_selected: int
    weight_outcomes: list[str] = Field(description="weight-setting attempts for the window, oldest first")


class Trends(Schema):
    windows: list[WindowTrendOut] = Field(description="the newest committed windows, oldest first")
