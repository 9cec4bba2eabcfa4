"""`gauntlet replay WINDOW`: recompute a committed window from stored inputs and compare.

Inputs: the base model rebuilt from the nearest checkpoint plus archived aggregates, the archived
submission bytes, the recorded fetch outcomes and held-out seed, the set of evaluated peers, the set
of flagged pairs' readings taken (validator/round/cross.py), and the rating state committed for the
window before. Everything after fetching is recomputed by the live
round's own `score_window`: checks, uniqueness, LossScore, the rating update and the selection.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scoring.authorship import Pair
from scoring.data import Dataset
from scoring.loss_score import evaluate_peers
from scoring.model import LlamaModel, param_spec
from scoring.ranking import RatingState, Status
from scoring.threads import pinned_threads
from scoring.types import Reason
from storage.records import EvaluationRecord, RatingRecord, SubmissionRecord, WindowRecord
from validator.round.checking import file_judge
from validator.round.config import RoundConfig
from validator.round.drift import sketch_loader
from validator.round.outcomes import DECODE, NORM, PeerTarget, PeerWindow, Scored, raised_in
from validator.round.pipeline import WindowContext, WindowInputs, score_window
from validator.round.recording import evaluation_record, rating_record, submission_record
from validator.round.recycling import earlier_loader
from validator.round.stages import Stages
from validator.round.window import WindowSeed
from validator.state.ledger import Ledger
from validator.stores.objstore import FetchResult
from validator.telemetry.metrics import Metrics

FIELDS = (
    "status", "reason", "score", "indicator", "mu", "sigma", "final", "selected", "weight", "links",
    "inflation", "step_loss", "retention", "drift", "proof", "last_aggregated", "last_matched", "gated",
    "readings", "claims", "claim_windows",
)  # fmt: skip
# recorded only since a later migration or state field: a window stored before has none of them, and
# what replay recomputes for it is left out of the comparison (nothing stored to compare with)
LATER = (
    "inflation", "step_loss", "retention", "drift", "proof", "last_aggregated", "last_matched", "gated",
    "claims", "claim_windows",
)  # fmt: skip


# the rating state's key behind each field of LATER that it holds (a state stored before a field
# existed lacks the key; one stored since holds it, None or not)
STATE_KEYS = {f: f for f in LATER if f not in ("inflation", "step_loss", "proof")} | {"proof": "proof_sum"}


def unrecorded(record: WindowRecord, stored: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The fields of LATER the window was stored without. A state field counts as recorded when the
    stored states hold its key: "None for every peer" hid a real difference (no peer had played a
    match yet, and replay's recomputed `last_matched` was never compared)."""
    keys = {k for r in record.ratings for k in r.state}
    return [
        f for f in LATER
        if (STATE_KEYS[f] not in keys if f in STATE_KEYS else all(row[f] is None for row in stored.values()))
    ]  # fmt: skip


def _unmeasured(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


@dataclass(frozen=True, slots=True)
class ReplayRow:
    hotkey: str
    uid: int
    stored: Mapping[str, Any]
    recomputed: Mapping[str, Any]

    @property
    def faulted(self) -> bool:
        """The live round's own fault decided this peer (`internal_error`: its judging raised, a
        worker's memory, an unreadable archive): nothing in the window's inputs re-derives it."""
        return self.stored.get("reason") == Reason.INTERNAL_ERROR

    def differences(self, tolerance: float) -> list[str]:
        if self.faulted:  # shown, never a difference: a replay of such a window could never pass
            return []
        out = []
        for f in FIELDS:
            a, b = self.stored.get(f), self.recomputed.get(f)
            if _unmeasured(a) and _unmeasured(b):  # a NaN stored on PostgreSQL before d4f33fe is None now
                continue
            if not _close(a, b, tolerance):
                out.append(f)
        return out


def _close(a: object, b: object, tolerance: float) -> bool:
    """Equal, floats within `tolerance` (relative above 1), mappings of them key by key."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tolerance * max(1.0, abs(a))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tolerance) for k in a)
    return a == b


def stored_readings(record: WindowRecord) -> dict[Pair, float]:
    """The window's readings (x, p) as stored with its copy pairs (none: not taken, or lost)."""
    out: dict[Pair, float] = {}
    for c in record.copy_pairs:
        a, b = c.hotkey_a, c.hotkey_b
        out |= {pair: t for pair, t in (((a, b), c.authorship_a), ((b, a), c.authorship_b)) if t is not None}
    return out


def _by_reader(readings: Mapping[Pair, float], hotkey: str) -> dict[str, float]:
    """Each update read on `hotkey`'s pages, by its sender."""
    return {p: t for (x, p), t in readings.items() if x == hotkey}


def _peer(sub: SubmissionRecord, ledger: Ledger, spool: Path) -> PeerWindow:
    """The fetch stage's outcome as recorded: the archived bytes in a file under `spool` (read as
    the live round reads its spooled downloads, one parameter at a time: held in memory together,
    every peer's bytes and decoded update took 8-11 times the window's uploads), statuses as they
    were."""
    target = PeerTarget(sub.uid, sub.hotkey, None)
    status = Status(sub.status)
    if (
        sub.content_digest is None
        or status in (Status.MISSING, Status.EARLY, Status.LATE)
        or _faulted_early(sub)
    ):
        return PeerWindow(target, status, sub.reason, sub.detail)
    path = spool / f"{sub.content_digest}.safetensors"
    path.write_bytes(ledger.archive.get(sub.content_digest))  # one submission in memory at a time
    ts = sub.storage_time.timestamp() if sub.storage_time else None
    fetch = FetchResult(
        sub.hotkey,
        Status.OK,
        path=path,
        size=path.stat().st_size,
        etag=sub.etag,
        version=sub.version_id,
        last_modified=ts,
        first_seen=sub.first_seen,
        seen_resolution_s=sub.seen_resolution_s,
    )
    return PeerWindow(target, Status.OK, None, "", fetch)


def _faulted_early(sub: SubmissionRecord) -> bool:
    """The live round's own fault rejected the peer before the checks compared it with the others
    (its decode or its norm raised): it stays rejected, as recorded. Judged again from its bytes it
    was valid, took part in the copy check, the clip reference and the links, and the other
    peers' rows differed. A peer whose evaluation raised is judged again: it was compared."""
    return sub.reason == Reason.INTERNAL_ERROR and raised_in(sub.detail) in (DECODE, NORM)


def _row(
    status: str,
    reason: str | None,
    evaluation: EvaluationRecord | None,
    rating: RatingRecord | None,
    selected: bool,
    weight: float | None,
) -> dict[str, Any]:
    return {
        "status": status,
        "reason": reason,
        "score": evaluation.score if evaluation else None,
        "indicator": evaluation.indicator if evaluation else None,
        "mu": rating.mu if rating else None,
        "sigma": rating.sigma if rating else None,
        "final": rating.final_score if rating else None,
        "selected": selected,
        "weight": weight,  # the update's coefficient in the outer step (gather peers)
        "links": dict(rating.state.get("links", {})) if rating else None,  # evidence across windows
        "claims": dict(rating.state.get("claims", {})) if rating else None,  # tied pairs' (scoring/claims.py)
        "claim_windows": dict(rating.state.get("claim_windows", {})) if rating else None,
        # the held-out loss at the probe step, and the retention average the selection reads
        "step_loss": evaluation.loss_rand_step if evaluation else None,
        "retention": rating.state.get("retention") if rating else None,
        # the persistence check's evidence (scoring/persistence.py), re-derived from the stored sketches
        "drift": rating.state.get("drift") if rating else None,
        # the page test's discounted sum (scoring/page_test.py), re-derived from recomputed page losses
        "proof": rating.state.get("proof_sum") if rating else None,
        # the window chain weights pay it from (scoring/earnings.py)
        "last_aggregated": rating.state.get("last_aggregated") if rating else None,
        "last_matched": rating.state.get("last_matched") if rating else None,  # played the match
        "gated": rating.state.get("gated") if rating else None,  # held at 0 by a gate: paid nothing
    }


def _stored_rows(record: WindowRecord) -> dict[str, dict[str, Any]]:
    evals = {e.hotkey: e for e in record.evaluations}
    ratings = {rating.hotkey: rating for rating in record.ratings}
    chosen = {s.hotkey: s.rank for s in record.selections if s.role == "gather"}
    weights = _weights(chosen, record.aggregate_weights)
    rows = {
        s.hotkey: _row(
            s.status,
            s.reason,
            evals.get(s.hotkey),
            ratings.get(s.hotkey),
            s.hotkey in chosen,
            weights.get(s.hotkey),
        )
        for s in record.submissions
    }
    readings = stored_readings(record)
    for s in record.submissions:
        rows[s.hotkey]["inflation"] = s.inflation
        rows[s.hotkey]["readings"] = _by_reader(readings, s.hotkey)
    return rows


def _weights(rank: Mapping[str, int], weights: Sequence[float]) -> dict[str, float]:
    """Each gathered peer's coefficient by hotkey (none for windows stored with equal weights)."""
    return {h: weights[r] for h, r in rank.items() if r < len(weights)}


def _recomputed_rows(scored: Scored) -> dict[str, dict[str, Any]]:
    """The same columns, through the same record mapping the live round commits with."""
    peers, state, selection, reference = scored.peers, scored.ratings, scored.selection, scored.reference
    gather = {h: i for i, h in enumerate(selection.gather)}
    weights = _weights(gather, selection.weights)
    rows: dict[str, dict[str, Any]] = {}
    for p in peers:
        evaluation = evaluation_record(p.hotkey, p.evaluation) if p.evaluation else None
        rating = rating_record(state.peers[p.hotkey]) if p.hotkey in state.peers else None
        rows[p.hotkey] = _row(
            p.status, p.reason, evaluation, rating, p.hotkey in gather, weights.get(p.hotkey)
        )
        rows[p.hotkey]["inflation"] = submission_record(p, "", reference).inflation
        rows[p.hotkey]["readings"] = _by_reader(scored.readings, p.hotkey)
    return rows


def replay_window(
    window: int, *, ledger: Ledger, model: LlamaModel, dataset: Dataset, cfg: RoundConfig
) -> list[ReplayRow]:
    """Stored vs recomputed, one row per peer of the window, at the live round's thread count."""
    with pinned_threads():
        return _replay(window, ledger=ledger, model=model, dataset=dataset, cfg=cfg)


def _replay(
    window: int, *, ledger: Ledger, model: LlamaModel, dataset: Dataset, cfg: RoundConfig
) -> list[ReplayRow]:
    record = ledger.window_detail(window)
    if record is None or ledger.window_state(window) != "committed":
        raise LookupError(f"window {window} is not committed")
    if record.salvaged:  # stages raised and were skipped: nothing to re-derive them from
        raise LookupError(f"window {window} was committed in salvage (stages that failed were skipped)")
    gm = ledger.model_at(model, window, outer_lr=cfg.outer_lr, codec=cfg.check.codec)
    if gm.base != record.base_fingerprint:
        raise ValueError(
            f"rebuilt base {gm.base[:16]} differs from the stored {record.base_fingerprint[:16]}"
        )
    seed = ledger.sketch_seed(window) or 0  # none stored: the window sketched nobody
    ctx = WindowContext(window, gm.base, param_spec(model), WindowSeed(record.heldout_seed), cfg, seed)
    with tempfile.TemporaryDirectory(prefix="gauntlet-replay-window-", dir=ledger.scratch) as spool:
        scored = _rescore(record, ledger, model, dataset, ctx, Path(spool))
        # while the files are there: an update read from its file reads them for its norms
        again = _recomputed_rows(scored)
    stored = _stored_rows(record)
    for field in unrecorded(record, stored):
        for row in again.values():
            row[field] = None
    uids = {s.hotkey: s.uid for s in record.submissions}
    return [ReplayRow(h, uids[h], stored[h], again.get(h, {})) for h in sorted(stored)]


def _rescore(
    record: WindowRecord, ledger: Ledger, model: LlamaModel, dataset: Dataset, ctx: WindowContext, spool: Path
) -> Scored:
    """The live round's `score_window` over the window's stored inputs."""
    peers = [_peer(s, ledger, spool) for s in record.submissions]
    judge = file_judge(
        window=ctx.window, base=ctx.base, spec=ctx.spec, cfg=ctx.cfg.check, archive=lambda data: ""
    )
    inputs = WindowInputs(
        model=model,
        dataset=dataset,
        judge=judge,
        ratings=ledger.ratings_after(ctx.window - 1) if ctx.window > 0 else RatingState(),
        seen_before=lambda digests: ledger.seen_before(digests, ctx.window),
        evaluator=evaluate_peers,
        budget=lambda: len(peers),
        # evaluated peers, and those whose evaluation was rejected as non-finite (it stored none)
        only={e.hotkey for e in record.evaluations}
        | {s.hotkey for s in record.submissions if s.reason == Reason.NON_FINITE_LOSS},
        read=stored_readings(record).keys(),  # a reading the live round lost stays lost
        earlier=earlier_loader(ledger, ctx.window, ctx.spec, ctx.cfg.check),
        sketches=sketch_loader(ledger, ctx.window, ctx.sketch_seed, ctx.cfg.ranking.persistence),
    )
    return score_window(ctx, peers, inputs, Stages(ctx.window, Metrics()))
