"""One window scored from its inputs: the live round and replay both run exactly this.

decode → replays → empty updates and outliers → copies (suspects) → recycled work → echoes → clip
reference → residual sketches (validator/round/drift.py) → held-out → evaluate → flagged pairs'
updates read on each other's pages, then the closest unflagged pairs' (validator/round/cross.py) →
convict suspected copiers, find updates sent twice among the closest → rate → select. The live
round decodes while it downloads, so its peers arrive judged and the decode step finds nothing left
to do; replay hands in the archived bytes and decodes them here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from scoring.authorship import Pair
from scoring.copy_findings import CopyFinding
from scoring.data import Dataset
from scoring.earnings import with_aggregated
from scoring.model import LlamaModel
from scoring.ranking import RatingState
from scoring.recycling import EarlierRows
from scoring.selection import Selection
from scoring.types import ParamSpec, Reason
from scoring.uniqueness import CopyCheck, offences, unconvicted
from validator.round.checking import Judge, Standing, check_window, convict_copies, reject_echoes
from validator.round.config import RoundConfig
from validator.round.cross import ReadingPlan, cross_readings, kept_for_readings, wanted_readings
from validator.round.drift import Drift, SketchLoader, alarmed_peers, measure_drift, no_sketches, with_drift
from validator.round.evaluation import (
    NOT_EVALUATED,
    EvalSetup,
    Evaluator,
    HeldOut,
    Sample,
    evaluate_window,
    heldout,
)
from validator.round.norms import clip_reference, proven_peers
from validator.round.outcomes import PeerWindow, Scored, page_tests
from validator.round.rating import linked_peers, rate_window, select_window, twins_of
from validator.round.recording import recordable
from validator.round.recycling import no_earlier, reject_recycled
from validator.round.stages import Stages
from validator.round.window import WindowSeed
from validator.workers.stats import WorkerStats

if TYPE_CHECKING:
    from validator.workers.remote import RemoteEvaluation

NOTHING_SELECTED: Selection[str] = Selection((), ())


@dataclass(frozen=True, slots=True)
class WindowContext:
    """What a window is scored over, fixed before its first stage."""

    window: int
    base: str  # the fingerprint of the model the window's updates apply to
    spec: ParamSpec  # that model's parameter shapes
    seed: WindowSeed
    cfg: RoundConfig
    sketch_seed: int = 0  # the residual sketches' hash seed, one for every window (scoring/persistence.py)


@dataclass(frozen=True, slots=True)
class WindowInputs:
    """What a window is scored from besides its peers."""

    model: LlamaModel  # at the window's base
    dataset: Dataset
    ratings: RatingState  # after the window before
    seen_before: Callable[[list[str]], set[str]]  # which payload or decoded digests earlier windows saw
    judge: Judge  # decodes a file (built once: the live round's eager decoder uses the same)
    evaluator: Evaluator
    budget: Callable[[], int]  # how many peers the evaluation may take, asked when it starts
    only: Collection[str] | None = None  # evaluate exactly these (replay: the recorded peers)
    read: Collection[Pair] | None = None  # of the flagged pairs' readings, only these (replay: the stored)
    remote: RemoteEvaluation | None = None  # evaluate on workers instead of `evaluator`
    earlier: EarlierRows = no_earlier  # earlier windows' aggregated updates (the recycled-work check)
    sketches: SketchLoader = no_sketches  # the peers' residuals of earlier windows (validator/round/drift.py)


def score_window(
    ctx: WindowContext, peers: Sequence[PeerWindow], inputs: WindowInputs, stages: Stages
) -> Scored:
    """The window's peers checked, evaluated, rated and selected, one `stages` stage each."""
    with stages("check"):
        # what the ratings before the window say of each peer, read once for every stage below
        standing = stages.salvage("standing", lambda: _standing(ctx, inputs), Standing)
        checked, copies, reference = stages.salvage(
            "check", lambda: _check(ctx, peers, inputs, standing), lambda: _unjudged(peers)
        )
        suspects = offences(copies.findings).keys()
        drift = stages.salvage("drift", lambda: _drift(ctx, checked, inputs, suspects), Drift)
    with stages("evaluate"):
        held, evaluated, workers = stages.salvage(
            "evaluate",
            lambda: _evaluate(ctx, checked, reference, inputs, copies.findings, standing.proven),
            lambda: (NOT_EVALUATED, checked, []),
        )
        seconds = tuple(p.evaluation.timings.total_s for p in evaluated if p.evaluation is not None)
        evaluated = recordable(evaluated, ctx.window)
        setup, tests = _setup(ctx, inputs), page_tests(evaluated)
        readings: dict[Pair, float] = stages.salvage(
            "cross",
            lambda: cross_readings(
                setup,
                evaluated,
                _wanted(ctx, evaluated, copies, tests, inputs, standing.proven),
                held,
                reference,
            ),
            dict,
        )
        evaluated, copies = stages.salvage(
            "convict",
            lambda: convict_copies(evaluated, copies, tests, readings),
            lambda: (evaluated, unconvicted(copies)),
        )
    with stages("rate"):
        ratings, selection = stages.salvage(
            "rate",
            lambda: rate_and_select(ctx, evaluated, copies, reference, inputs.ratings, drift),
            lambda: (RatingState(inputs.ratings.peers, ctx.window), NOTHING_SELECTED),
        )
    loss = held.loss_before
    return Scored(
        evaluated, copies.findings, reference, ratings, selection, loss, seconds, tuple(workers),
        residuals=drift.residuals, sketch_seed=ctx.sketch_seed, readings=copies.readings,
    )  # fmt: skip


def _standing(ctx: WindowContext, inputs: WindowInputs) -> Standing:
    # peers linked before this window leave the links' consensus (scoring/uniqueness.py)
    return Standing(
        linked=frozenset(linked_peers(inputs.ratings, ctx.cfg.ranking)),
        proven=proven_peers(inputs.ratings, ctx.cfg.ranking.rating),
    )


def _check(
    ctx: WindowContext, peers: Sequence[PeerWindow], inputs: WindowInputs, standing: Standing
) -> tuple[list[PeerWindow], CopyCheck, dict[str, float]]:
    cfg = ctx.cfg
    checked, copies = check_window(peers, inputs.judge, cfg.check, inputs.seen_before, ctx.seed, standing)
    # another sample of chunks than the copy check's: seed + 1
    checked = reject_recycled(checked, inputs.earlier, cfg.check, seed=ctx.seed.number + 1)
    checked = reject_echoes(
        checked, cfg.check, seed=ctx.seed.number + 2, proven=standing.proven, copies=copies
    )
    return checked, copies, clip_reference(checked, cfg.check, standing.proven)


def _drift(
    ctx: WindowContext, peers: list[PeerWindow], inputs: WindowInputs, suspects: Collection[str]
) -> Drift:
    """Suspected copiers (scoring/copy_findings.py `oriented`) stay out of the residuals' consensus,
    as peers at the alarm do: a copy counts its victim's direction twice in it."""
    cfg = ctx.cfg.ranking.persistence
    outside = alarmed_peers(inputs.ratings, cfg) | set(suspects)
    return measure_drift(peers, cfg, ctx.sketch_seed, inputs.sketches, outside)


def _wanted(
    ctx: WindowContext,
    peers: list[PeerWindow],
    copies: CopyCheck,
    t: dict[str, float],
    inputs: WindowInputs,
    proven: frozenset[str],
) -> list[Pair]:
    # the budget asked after the evaluation: what the time left affords (kept for the readings)
    plan = ReadingPlan(ctx.cfg.eval.cross_share, proven, inputs.budget(), inputs.read)
    return wanted_readings(peers, copies.findings, t, plan, copies.watched)


def _unjudged(peers: Sequence[PeerWindow]) -> tuple[list[PeerWindow], CopyCheck, dict[str, float]]:
    """The checks' fallback in a salvaged window: nothing unchecked is evaluated or aggregated. The
    peers keep their status (the failure is the validator's, so nobody is penalised for it)."""
    detail = "not judged: the window's checks failed"
    unjudged = [
        replace(p, update=None, reason=Reason.INTERNAL_ERROR, detail=detail) if p.valid else p for p in peers
    ]
    return unjudged, CopyCheck([]), {}


def _evaluate(
    ctx: WindowContext,
    peers: list[PeerWindow],
    reference: dict[str, float],
    inputs: WindowInputs,
    findings: Sequence[CopyFinding],
    proven: frozenset[str],
) -> tuple[HeldOut, list[PeerWindow], list[WorkerStats]]:
    setup = _setup(ctx, inputs)
    held = heldout(setup)

    def budget() -> int:  # what the readings of the flagged pairs may take is kept for them
        whole = inputs.budget()
        return max(1, whole - kept_for_readings(whole, ctx.cfg.eval.cross_share, findings, proven))

    sample = Sample(inputs.ratings, proven, budget, inputs.only)
    evaluated, workers = evaluate_window(setup, peers, held=held, reference=reference, sample=sample)
    return held, evaluated, workers


def _setup(ctx: WindowContext, inputs: WindowInputs) -> EvalSetup:
    return EvalSetup(
        inputs.model, inputs.dataset, ctx.window, ctx.seed, ctx.cfg.eval, inputs.evaluator,
        remote=inputs.remote, base=ctx.base,
    )  # fmt: skip


def rate_and_select(
    ctx: WindowContext,
    peers: list[PeerWindow],
    copies: CopyCheck,
    reference: dict[str, float],
    before: RatingState,
    drift: Drift,
) -> tuple[RatingState, Selection[str]]:
    """The ratings after the window and its aggregation set. The window's persistence evidence is
    folded in first, so that the match entry reads the drift the selection reads (folded in after
    rating, a peer reaching the alarm this window played the match the selection left it out of);
    a peer rated for the first time this window has its first drift evidence from its next one."""
    ranking = ctx.cfg.ranking
    drifted = with_drift(before, drift, ranking.persistence)
    ratings = rate_window(drifted, peers, ctx.window, ranking, copies, reference)
    selection = select_window(
        ratings, peers, ctx.window, ranking, twins_of(ratings, copies, ranking, peers), reference
    )
    return with_aggregated(ratings, selection.gather, ctx.window), selection  # what weights pay for
