"""The round: one window scored as a short sequence of named stages (DESIGN.md §3).

fetch → check → evaluate → rate/select → commit → aggregate → weights. The database commit comes
before the model moves: a crash before it leaves no trace of the window, a crash after it is
repaired by rebuilding the model from storage, so a restart re-runs exactly the unfinished window.

Each peer is judged on its own: what raises while decoding, checking, evaluating or recording one
peer makes that peer `internal_error` and the window goes on. A window that fails anyway is
retried by the service; after a few attempts it runs *salvaged*: a stage that raises over the
whole window (checks, evaluation) is skipped and the window is committed with what could be scored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import structlog
from pydantic import SecretBytes

from scoring.data import Dataset, window_seed
from scoring.decoder import decode_submission
from scoring.loss_score import evaluate_peers
from scoring.model import param_spec
from scoring.ranking import RatingState
from scoring.selection import Selection
from scoring.types import Reason
from scoring.uniqueness import CopyFinding, unclear_pairs
from storage.records import WindowRecord
from validator.chain.protocol import BLOCK_SECONDS, Chain, WindowConfig
from validator.events import Events, NullEvents
from validator.fetch.fetching import fetch_window, read_targets
from validator.metrics import Metrics, StageTimer
from validator.round.checking import (
    CheckConfig,
    Decoder,
    EagerDecoder,
    Judged,
    check_window,
    clip_reference,
    file_judge,
    proven_peers,
)
from validator.round.evaluation import EvalConfig, Evaluator, HeldOut, evaluate_window, heldout
from validator.round.outcomes import PeerWindow
from validator.round.policy import PolicyConfig, rate_window, select_window
from validator.round.publishing import SelectionPublisher, selection_document
from validator.round.recording import recordable, window_record
from validator.round.weighing import Weigher
from validator.state.global_model import GlobalModel
from validator.state.ledger import Ledger
from validator.stores.commitments import LocationPolicy
from validator.stores.objstore import Fetcher

log = structlog.get_logger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RoundConfig:
    check: CheckConfig
    eval: EvalConfig
    policy: PolicyConfig
    window: WindowConfig
    secret: SecretBytes  # masked in every repr, log and traceback; unwrapped only by `window_seed`
    outer_lr: float = 0.4
    fetch_deadline_s: float = 120.0
    config_digest: str = "0" * 64
    code_version: str = "dev"


@dataclass(frozen=True, slots=True)
class WindowReport:
    window: int
    peers: Sequence[PeerWindow]
    selection: Selection[str]
    heldout_loss: float
    timings: dict[str, float]


def no_hook(stage: str, window: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Judging:
    """The functions that judge one peer's bytes and update: the seam where tests inject faults."""

    decode: Decoder = decode_submission
    evaluate: Evaluator = evaluate_peers


@dataclass(slots=True)
class Round:
    """Everything a round needs, wired once at the entry point."""

    chain: Chain
    fetcher: Fetcher
    locations: LocationPolicy
    dataset: Dataset
    model: GlobalModel
    ratings: RatingState
    ledger: Ledger
    weigher: Weigher
    cfg: RoundConfig
    validator_hotkey: str | None = None
    events: Events = field(default_factory=NullEvents)
    metrics: Metrics = field(default_factory=Metrics)
    publisher: SelectionPublisher = field(default_factory=SelectionPublisher)
    hook: Callable[[str, int], None] = no_hook  # called after each stage; tests inject crashes here
    seconds_per_eval: float = 0.1  # running estimate that sizes the evaluation budget
    judging: Judging = Judging()


_NOTHING_SELECTED: Selection[str] = Selection((), ())


def run_window(r: Round, window: int, *, salvage: bool = False) -> WindowReport:
    """Score and commit `window`. `salvage`: stages that raise are skipped, not retried (the
    service's last resort for a window that keeps failing)."""
    if r.model.window != window:
        raise ValueError(f"the model is at window {r.model.window}, not {window}")
    timer, started = StageTimer(r.metrics), time.perf_counter()
    skipped: list[str] | None = [] if salvage else None  # stages a salvaged window gave up
    seed = window_seed(r.cfg.secret, window)  # secret per window: held-out pages, samples, sketches
    r.events.publish("window_opened", window)
    with timer("fetch"):  # decoding overlaps the downloads
        peers, judged = _fetch_and_decode(r, window, seed)
    r.hook("fetch", window)
    with timer("check"):
        peers, findings, reference = _stage(
            skipped, "check", lambda: _check(r, window, peers, judged, seed), lambda: _unjudged(peers)
        )
    r.hook("check", window)
    with timer("evaluate"):
        held, peers = _stage(
            skipped, "evaluate", lambda: _evaluate(r, window, peers, seed, reference, started),
            lambda: (HeldOut(seed, (), math.nan), peers),
        )  # fmt: skip
        peers = recordable(peers, window)
    r.hook("evaluate", window)
    with timer("rate"):
        ratings, selection = _stage(
            skipped, "rate", lambda: _rate(r, window, peers, findings),
            lambda: (RatingState(r.ratings.peers, window), _NOTHING_SELECTED),
        )  # fmt: skip
        updates = {p.hotkey: p.update for p in peers if p.update is not None}
        chosen = [updates[h] for h in selection.gather]  # selection only picks valid peers
        digests = [u.digest for u in chosen]
    with timer("commit"):
        header = _header(r, window, held.seed, timer.seconds, salvaged=bool(skipped))
        record = window_record(
            header, peers=peers, state=ratings, findings=findings, selection=selection,
            aggregate_digests=digests, reference=reference, cfg=r.cfg.policy.rating,
        )  # fmt: skip
        r.ledger.commit(record)
    r.hook("commit", window)
    with timer("aggregate"):
        r.model.advance([u.params for u in chosen], digests, reference, r.cfg.outer_lr)
        r.ratings = ratings
        r.ledger.maybe_checkpoint(r.model)
        r.ledger.prune(window)
    r.hook("aggregate", window)
    with timer("publish"):
        r.publisher.publish(
            selection_document(
                window, record.base_fingerprint, r.model.base, peers, selection.gather, selection.reserve
            )
        )
    with timer("weights"):
        r.weigher.maybe_set(window, ratings)
    _report_metrics(r, window, peers)
    r.events.publish("window_committed", window, selected=list(selection.gather), base=r.model.base)
    return WindowReport(window, peers, selection, held.loss_before, timer.seconds)


def _rate(
    r: Round, window: int, peers: list[PeerWindow], findings: list[CopyFinding]
) -> tuple[RatingState, Selection[str]]:
    ratings = rate_window(r.ratings, peers, window, r.cfg.policy)
    return ratings, select_window(ratings, peers, window, r.cfg.policy, twins=unclear_pairs(findings))


def _fetch_and_decode(r: Round, window: int, seed: str) -> tuple[list[PeerWindow], dict[str, Judged]]:
    """Download every submission; each is archived and decoded as soon as it has arrived."""
    targets = read_targets(r.chain, r.locations, exclude=r.validator_hotkey)
    put_start = r.chain.block_timestamp(r.cfg.window.first_block(window + 1))
    judge = file_judge(
        window=window,
        base=r.model.base,
        spec=param_spec(r.model.model),
        cfg=r.cfg.check,
        archive=r.ledger.archive.put,
        decode=r.judging.decode,
    )
    eager = EagerDecoder(judge, {t.hotkey: t.uid for t in targets})
    try:
        peers = fetch_window(
            r.fetcher, targets, window, put_start, r.cfg.fetch_deadline_s, on_result=eager, seed=seed
        )  # the order is the window's secret: stalling peers cannot arrange to be first
    finally:
        judged = eager.results()
    return peers, judged


def _stage(skipped: list[str] | None, stage: str, work: Callable[[], T], fallback: Callable[[], T]) -> T:
    """`work()`; in a salvaged window (`skipped` is a list), `fallback()` when it raises (logged
    with its traceback, the stage named in `skipped` so the record says it was not computed)."""
    if skipped is None:
        return work()
    try:
        return work()
    except Exception:  # the salvaged window's boundary: this stage is given up, the window goes on
        log.exception("stage_skipped", stage=stage)
        skipped.append(stage)
        return fallback()


def _check(
    r: Round, window: int, peers: list[PeerWindow], judged: dict[str, Judged], seed: str
) -> tuple[list[PeerWindow], list[CopyFinding], dict[str, float]]:
    checked, findings = check_window(
        peers, window=window, base=r.model.base, spec=param_spec(r.model.model), cfg=r.cfg.check,
        archive=r.ledger.archive.put, seen_before=lambda digests: r.ledger.seen_before(digests, window),
        secret_seed=seed, ready=judged, decode=r.judging.decode,
    )  # fmt: skip
    trusted = proven_peers(r.ratings, r.cfg.policy.rating)
    return checked, findings, clip_reference(checked, r.cfg.check, trusted)


def _unjudged(peers: list[PeerWindow]) -> tuple[list[PeerWindow], list[CopyFinding], dict[str, float]]:
    """The checks' fallback in a salvaged window: nothing unchecked is evaluated or aggregated. The
    peers keep their status (the failure is the validator's, so nobody is penalised for it)."""
    detail = "not judged: the window's checks failed"
    unjudged = [
        replace(p, update=None, reason=Reason.INTERNAL_ERROR, detail=detail) if p.valid else p for p in peers
    ]
    return unjudged, [], {}


def _evaluate(
    r: Round, window: int, peers: list[PeerWindow], seed: str, reference: dict[str, float], started: float
) -> tuple[HeldOut, list[PeerWindow]]:
    """Evaluate as many peers as the time left in the window affords (all when it allows)."""
    held = heldout(r.model.model, r.dataset, seed, r.cfg.eval)
    window_s = r.cfg.window.blocks_per_window * BLOCK_SECONDS
    left = window_s - (time.perf_counter() - started)
    budget = min(r.cfg.eval.budget, max(1, int(left / max(r.seconds_per_eval, 1e-3))))
    out = evaluate_window(
        peers, model=r.model.model, dataset=r.dataset, window=window, held=held, reference=reference,
        ratings=r.ratings, budget=budget, cfg=r.cfg.eval, evaluator=r.judging.evaluate,
    )  # fmt: skip
    times = [p.evaluation.timings.total_s for p in out if p.evaluation is not None]
    if times:
        r.seconds_per_eval = 0.5 * r.seconds_per_eval + 0.5 * (sum(times) / len(times))
        for t in times:
            r.metrics.eval_seconds.observe(t)
    return held, out


def _header(r: Round, window: int, seed: str, timings: dict[str, float], *, salvaged: bool) -> WindowRecord:
    return WindowRecord(
        window=window,
        base_fingerprint=r.model.base,
        heldout_seed=seed,
        config_digest=r.cfg.config_digest,
        code_version=r.cfg.code_version,
        start_block=r.cfg.window.first_block(window),
        timings=dict(timings),
        salvaged=salvaged,
    )


def _report_metrics(r: Round, window: int, peers: Sequence[PeerWindow]) -> None:
    for status in ("ok", "missing", "early", "late", "invalid"):
        r.metrics.peers.labels(status=status).set(sum(p.status == status for p in peers))
    r.metrics.windows.inc()
    r.metrics.last_window.set(window)
