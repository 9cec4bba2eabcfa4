"""The round: one window scored as a short sequence of named stages (DESIGN.md §3).

fetch → check → evaluate → rate → commit → aggregate → publish → weights. The scoring stages
(check to rate) are `score_window`, which replay runs too. The database commit comes before the
model moves: a crash before it leaves no trace of the window, a crash after it is repaired by
rebuilding the model from storage, so a restart re-runs exactly the unfinished window.

Each peer is judged on its own: what raises while decoding, checking, evaluating or recording one
peer makes that peer `internal_error` and the window goes on. A window that fails anyway is
retried by the service; after a few attempts it runs *salvaged*: a stage that raises over the
whole window (checks, evaluation, rating) is skipped and the window is committed with what could
be scored.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from scoring.data import Dataset
from scoring.earnings import paid
from scoring.lazy_update import judge_submission
from scoring.loss_score import evaluate_peers
from scoring.model import param_spec
from scoring.persistence import sketch_seed
from scoring.ranking import RatingState, Status
from scoring.selection import Selection
from scoring.threads import pinned_threads
from storage.records import WORKER_TIMINGS, WindowRecord
from validator.chain.protocol import BLOCK_SECONDS, Chain
from validator.round.checking import Decoder, EagerDecoder, Judge, file_judge
from validator.round.config import RoundConfig
from validator.round.drift import sketch_loader
from validator.round.evaluation import Evaluator
from validator.round.fetching import PutWindow, fetch_window, read_targets
from validator.round.outcomes import PeerWindow
from validator.round.pipeline import WindowContext, WindowInputs, score_window
from validator.round.publishing import SelectionPublisher, selection_document
from validator.round.recording import window_record
from validator.round.recycling import earlier_loader
from validator.round.stages import Hook, Stages, no_hook
from validator.round.weighing import Weigher
from validator.round.window import WindowSeed
from validator.state.global_model import GlobalModel
from validator.state.ledger import Ledger
from validator.stores.commitments import LocationPolicy
from validator.stores.objstore import Fetcher
from validator.telemetry.events import Events, NullEvents
from validator.telemetry.metrics import Metrics
from validator.workers.stats import summary

if TYPE_CHECKING:  # the workers import the round's evaluation config
    from validator.workers.remote import RemoteEvaluation

log = structlog.get_logger(__name__)
LATELY = 3  # windows back that an aggregated peer is fetched ahead of the others


@dataclass(frozen=True, slots=True)
class Judging:
    """The functions that judge one peer's bytes and update: the seam where tests inject faults."""

    decode: Decoder = judge_submission
    evaluate: Evaluator = evaluate_peers
    remote: RemoteEvaluation | None = None  # evaluation workers (eval_workers > 0) instead of `evaluate`


@dataclass(frozen=True, slots=True)
class Round:
    """What every window uses, wired once at the entry point; no window changes it."""

    chain: Chain
    fetcher: Fetcher
    locations: LocationPolicy
    dataset: Dataset
    ledger: Ledger
    weigher: Weigher
    cfg: RoundConfig
    validator_hotkey: str | None = None
    events: Events = field(default_factory=NullEvents)
    metrics: Metrics = field(default_factory=Metrics)
    publisher: SelectionPublisher = field(default_factory=SelectionPublisher)
    judging: Judging = Judging()
    hook: Hook = no_hook  # called after each stage; tests inject crashes here
    # the evaluation budget follows the time left in the window (a live validator). The demo and the
    # benchmarks run windows back to back off a simulated chain: there only `eval.budget` binds, so
    # what they measure does not move with the machine's load (a starved run left a newcomer unevaluated)
    paced: bool = True


@dataclass(frozen=True, slots=True)
class WindowState:
    """Where the next window starts. A window takes one and its report carries the next; the model's
    memory is reused (the aggregate stage advances it in place)."""

    model: GlobalModel
    ratings: RatingState
    seconds_per_eval: float = 0.1  # running estimate that sizes the evaluation budget


@dataclass(frozen=True, slots=True)
class WindowReport:
    window: int
    peers: Sequence[PeerWindow]
    selection: Selection[str]
    heldout_loss: float
    timings: dict[str, float]
    state: WindowState  # where the next window starts


def run_window(rnd: Round, state: WindowState, window: int, *, salvage: bool = False) -> WindowReport:
    """Score and commit `window`. `salvage`: stages that raise are skipped, not retried (the
    service's last resort for a window that keeps failing). Torch runs at the fixed thread count
    replay uses (scoring/threads.py): norms, losses and the outer step must not depend on cores."""
    with pinned_threads():
        return _run_window(rnd, state, window, salvage=salvage)


def _run_window(rnd: Round, state: WindowState, window: int, *, salvage: bool) -> WindowReport:
    gm = state.model
    if gm.window != window:
        raise ValueError(f"the model is at window {gm.window}, not {window}")
    stages, started = Stages(window, rnd.metrics, rnd.hook, salvage=salvage), time.perf_counter()
    seed = WindowSeed.derive(rnd.cfg.secret, window)  # secret per window: pages, samples, sketches
    ctx = WindowContext(window, gm.base, param_spec(gm.model), seed, rnd.cfg, sketch_seed(rnd.cfg.secret))
    judge = file_judge(
        window=window,
        base=gm.base,
        spec=ctx.spec,
        cfg=rnd.cfg.check,
        archive=rnd.ledger.archive.put,
        decode=rnd.judging.decode,
    )
    rnd.events.publish("window_opened", window)
    with stages("fetch"):  # decoding overlaps the downloads
        peers = _fetch_and_decode(rnd, ctx, judge, _aggregated_lately(state.ratings, window))
    remote = rnd.judging.remote
    per_peer = state.seconds_per_eval / (1 if remote is None else remote.size)  # workers run at once
    inputs = WindowInputs(
        model=gm.model,
        dataset=rnd.dataset,
        ratings=state.ratings,
        judge=judge,
        seen_before=lambda digests: rnd.ledger.seen_before(digests, window),
        evaluator=rnd.judging.evaluate,
        budget=lambda: _budget(rnd.cfg, per_peer, started) if rnd.paced else rnd.cfg.eval.budget,
        remote=remote,
        earlier=earlier_loader(rnd.ledger, window, ctx.spec, rnd.cfg.check),
        sketches=sketch_loader(rnd.ledger, window, ctx.sketch_seed, rnd.cfg.ranking.persistence),
    )
    scored = score_window(ctx, peers, inputs, stages)
    updates = {p.hotkey: p.update for p in scored.peers if p.update is not None}
    chosen = [updates[h] for h in scored.selection.gather]  # selection only picks valid peers
    digests = [u.digest for u in chosen]
    with stages("commit"):
        timings = {**stages.seconds, WORKER_TIMINGS: summary(scored.workers)}  # who evaluated, how fast
        header = _header(ctx, timings, salvaged=stages.salvaged)
        record = window_record(header, scored, digests, rnd.cfg.ranking.rating)
        rnd.ledger.commit(record)
    for peer in scored.peers:  # committed: a client refreshing on the event reads the peer's row
        rnd.events.publish("peer_scored", window, uid=peer.uid, hotkey=peer.hotkey, status=str(peer.status))
    with stages("aggregate"):
        coefficients = scored.selection.weights
        gm.advance([u.params for u in chosen], digests, scored.reference, rnd.cfg.outer_lr, coefficients)
        _checkpoint(rnd, gm)
        _prune(rnd, window)
    with stages("publish"):
        bases, outer_lr = (ctx.base, gm.base), rnd.cfg.outer_lr
        doc = selection_document(window, bases, scored.peers, scored.selection, scored.reference, outer_lr)
        rnd.publisher.publish(doc)
    with stages("weights"):
        weights = rnd.weigher.maybe_set(window, scored.ratings)
        if weights is not None and weights.outcome in ("ok", "withheld"):
            rnd.events.publish("weights_set", window, uids=list(weights.uids))
    _report_metrics(rnd, window, scored.peers, scored.eval_seconds)
    rnd.events.publish("window_committed", window, selected=list(scored.selection.gather), base=gm.base)
    after = WindowState(gm, scored.ratings, _rate_estimate(state.seconds_per_eval, scored.eval_seconds))
    return WindowReport(window, scored.peers, scored.selection, scored.heldout_loss, stages.seconds, after)


def _checkpoint(rnd: Round, gm: GlobalModel) -> None:
    """The window's checkpoint when due. The window is committed and the step taken: a store that
    refuses the write (a full disk) must not skip its publication and weights. The next window
    writes the checkpoint instead, and pruning keeps what the checkpoints written still need."""
    try:
        rnd.ledger.maybe_checkpoint(gm)
    except Exception:  # the blob store is an external system: logged, retried next window
        log.exception("checkpoint_failed", window=gm.window)


def _prune(rnd: Round, window: int) -> None:
    """Retention's deletes, after the commit: a store or database fault here is logged and the next
    window prunes again. Raised, it failed the round after its commit, and the window's selection
    was never published nor its due weights set."""
    horizon, earlier = rnd.cfg.ranking.persistence.horizon, rnd.cfg.check.recycled_windows
    try:
        rnd.ledger.prune(window, sketch_windows=horizon, earlier_windows=earlier)
    except Exception:
        log.exception("prune_failed", window=window)


def _aggregated_lately(ratings: RatingState, window: int) -> frozenset[str]:
    """Peers an outer step of the last `LATELY` windows aggregated, unless banned since (the same
    test as pay's): they are fetched first, so a crowd of slow stores cannot keep proven work out."""
    return frozenset(h for h, r in ratings.peers.items() if paid(r, window - 1, LATELY))


def _fetch_and_decode(
    rnd: Round, ctx: WindowContext, judge: Judge, first: frozenset[str]
) -> list[PeerWindow]:
    """Download every submission; each is archived and decoded as soon as it has arrived."""
    targets = read_targets(rnd.chain, rnd.locations, exclude=rnd.validator_hotkey)
    put_start = rnd.chain.block_timestamp(rnd.cfg.window.first_block(ctx.window + 1))
    deadline = rnd.cfg.fetch_deadline_s
    with EagerDecoder(judge, {t.hotkey: t.uid for t in targets}) as eager:
        # the order is the window's secret: stalling peers cannot arrange to be first
        put = PutWindow(ctx.window, put_start, first)
        fetched = fetch_window(rnd.fetcher, targets, put, deadline, on_result=eager, seed=ctx.seed.hex)
        return eager.outcomes(fetched)


def _budget(cfg: RoundConfig, seconds_per_eval: float, started: float) -> int:
    """As many evaluations as the time left in the window affords (all when it allows)."""
    left = cfg.window.blocks_per_window * BLOCK_SECONDS - (time.perf_counter() - started)
    return min(cfg.eval.budget, max(1, int(left / max(seconds_per_eval, 1e-3))))


def _rate_estimate(seconds_per_eval: float, seconds: Sequence[float]) -> float:
    """The running estimate of seconds per evaluation, moved halfway to this window's mean."""
    return 0.5 * seconds_per_eval + 0.5 * (sum(seconds) / len(seconds)) if seconds else seconds_per_eval


def _header(ctx: WindowContext, timings: dict[str, object], *, salvaged: bool) -> WindowRecord:
    return WindowRecord(
        window=ctx.window,
        base_fingerprint=ctx.base,
        heldout_seed=ctx.seed.hex,
        config_digest=ctx.cfg.config_digest,
        code_version=ctx.cfg.code_version,
        start_block=ctx.cfg.window.first_block(ctx.window),
        timings=dict(timings),
        salvaged=salvaged,
    )


def _report_metrics(rnd: Round, window: int, peers: Sequence[PeerWindow], seconds: Sequence[float]) -> None:
    for s in seconds:
        rnd.metrics.eval_seconds.observe(s)
    for status in (Status.OK, Status.MISSING, Status.EARLY, Status.LATE, Status.INVALID):
        rnd.metrics.peers.labels(status=status).set(sum(p.status == status for p in peers))
    rnd.metrics.windows.inc()
    rnd.metrics.last_window.set(window)
