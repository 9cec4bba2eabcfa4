"""Window reads: storage records in, response models out. Run in the threadpool with a read session."""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy.orm import Session

from api.cache import StoredWindow, WindowMemo
from api.schemas import (
    CopyPairOut,
    EvaluationOut,
    PenaltyOut,
    RatingOut,
    SelectedPeer,
    SelectionOut,
    SubmissionOut,
    WeightSetOut,
    WindowDetail,
    WindowList,
    WindowSelection,
    WindowSummaryOut,
    WorkerOut,
    WorkersNow,
)
from storage.queries import list_windows, weight_sets, window_detail
from storage.records import (
    COMMITTED,
    WORKER_TIMINGS,
    EvaluationRecord,
    JsonMap,
    RatingRecord,
    SubmissionRecord,
)

M = TypeVar("M", bound=BaseModel)
MAX_WINDOW = 2**31 - 1  # the column is a 32-bit integer: larger numbers cannot exist


def below(window: int) -> int | None:
    """The `before` bound that includes `window`; None past the column's range (it would overflow)."""
    return None if window >= MAX_WINDOW else window + 1


def load_window(session: Session, memo: WindowMemo, window: int) -> StoredWindow | None:
    """A window's header and content; committed windows are immutable, so they are memoized."""
    stored = memo.get(window)
    if stored is not None:
        return stored
    if not 0 <= window <= MAX_WINDOW:
        return None
    headers = list_windows(session=session, limit=1, before=below(window))
    if not headers or headers[0].window != window:
        return None
    record = window_detail(session=session, window=window)
    if record is None:  # deleted between the two reads
        return None
    stored = (headers[0], record)
    if headers[0].state == COMMITTED:
        memo.put(stored)
    return stored


def public(model: type[M], record: object, **extra: Any) -> M:
    """`model` from the record's attributes of the same names. Only the schema's fields are read:
    what storage adds to a record stays internal until the schema names it."""
    return model(**{n: getattr(record, n) for n in model.model_fields if n not in extra}, **extra)


def rating_out(r: RatingRecord) -> RatingOut:
    """The stored rating with the inputs of the aggregation decision its state carries (states
    stored before a field existed show its default)."""
    n = int(r.state.get("evaluations", 0))
    return public(
        RatingOut, r, penalty=dict(r.penalty), evaluations=n, positives=int(r.state.get("positives", 0)),
        mean_margin=float(r.state.get("margin_sum", 0.0)) / n if n else 0.0,
        proof_z=_proof_z(r.state),
        links={str(k): float(v) for k, v in dict(r.state.get("links", {})).items()},
        claims={str(k): float(v) for k, v in dict(r.state.get("claims", {})).items()},
        claim_windows={str(k): int(v) for k, v in dict(r.state.get("claim_windows", {})).items()},
        retention=_optional(r.state.get("retention")), drift=float(r.state.get("drift", 0.0)),
        drift_similarity=_optional(r.state.get("drift_similarity")),
        last_aggregated=_whole(r.state.get("last_aggregated")),
        last_matched=_whole(r.state.get("last_matched")),
    )  # fmt: skip


def _proof_z(state: JsonMap) -> float | None:
    """The page test's statistic (scoring/page_test.py `stouffer`); none before any window had one."""
    weight = float(state.get("proof_weight", 0.0))
    return float(state.get("proof_sum", 0.0)) / math.sqrt(weight) if weight > 0 else None


def _whole(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _optional(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def evaluation_out(e: EvaluationRecord) -> EvaluationOut:
    return public(EvaluationOut, e)


def submission_out(s: SubmissionRecord) -> SubmissionOut:
    # Only the public fields: the record also carries internal ones (the archive key, the
    # validator's own sightings), and a field added to storage must not leak or break the schema.
    return public(SubmissionOut, s)


def workers_out(timings: JsonMap) -> list[WorkerOut]:
    """The evaluation workers a window recorded beside its stage timings (none before they were)."""
    entries = timings.get(WORKER_TIMINGS)
    if not isinstance(entries, list):
        return []
    # only the schema's fields: what a newer validator adds to an entry stays internal until named
    return [WorkerOut.model_validate({n: e[n] for n in WorkerOut.model_fields if n in e}) for e in entries]


def stage_timings(timings: JsonMap) -> dict[str, Any]:
    return {k: v for k, v in timings.items() if k != WORKER_TIMINGS}


def workers_now(session: Session, memo: WindowMemo, latest: int | None) -> WorkersNow:
    """Who evaluated the newest committed window (`latest`, as the commit watcher last saw it)."""
    stored = None if latest is None else load_window(session, memo, latest)
    if stored is None:
        return WorkersNow(window=None, workers=[])
    return WorkersNow(window=latest, workers=workers_out(stored[1].timings))


def window_list(session: Session, *, limit: int, before: int | None) -> WindowList:
    rows = list_windows(session=session, limit=limit, before=before)
    return WindowList(
        windows=[public(WindowSummaryOut, w) for w in rows],
        next_before=rows[-1].window if len(rows) == limit and rows[-1].window > 0 else None,
    )


def window_body(session: Session, memo: WindowMemo, window: int) -> WindowDetail | None:
    stored = load_window(session, memo, window)
    if stored is None:
        return None
    summary, record = stored
    return WindowDetail(
        summary=public(WindowSummaryOut, summary),
        heldout_seed=record.heldout_seed,
        config_digest=record.config_digest,
        code_version=record.code_version,
        timings=stage_timings(record.timings),
        workers=workers_out(record.timings),
        aggregate_digests=list(record.aggregate_digests),
        submissions=[submission_out(s) for s in record.submissions],
        evaluations=[evaluation_out(e) for e in record.evaluations],
        ratings=[rating_out(r) for r in record.ratings],
        penalties=[public(PenaltyOut, p) for p in record.penalties],
        copy_pairs=[public(CopyPairOut, c) for c in record.copy_pairs],
        selection=[public(SelectionOut, s) for s in record.selections],
        weight_sets=[
            public(WeightSetOut, ws, uids=list(ws.uids), weights=list(ws.weights))
            for ws in reversed(weight_sets(session=session, window=window))
        ],
    )


def selection_body(session: Session, memo: WindowMemo, window: int) -> WindowSelection | None:
    """What peers need to aggregate: the chosen submissions, pinned by object version and digest."""
    stored = load_window(session, memo, window)
    if stored is None:
        return None
    summary, record = stored
    subs = {s.hotkey: s for s in record.submissions}
    # the recorded weights follow the gather ranks (none: equal); the outer step sums the clipped,
    # weighted updates in payload-digest order (validator/state/global_model.py)
    weights = dict(enumerate(record.aggregate_weights))
    peers = []
    for sel in record.selections:
        sub = subs.get(sel.hotkey)
        peers.append(
            public(
                SelectedPeer,
                sel,
                weight=weights.get(sel.rank) if sel.role == "gather" else None,
                object_key=sub.object_key if sub else None,
                etag=sub.etag if sub else None,
                version_id=sub.version_id if sub else None,
                payload_digest=sub.payload_digest if sub else None,
            )
        )
    return WindowSelection(
        window=window,
        state=summary.state,
        base_fingerprint=summary.base_fingerprint,
        aggregate_digests=list(record.aggregate_digests),
        clip_reference={name: float(v) for name, v in sorted(record.clip_reference.items())},
        peers=peers,
    )
