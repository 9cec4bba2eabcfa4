"""LossScore for the peers this window can afford, on assigned and held-out pages."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Protocol

import structlog
import torch

from scoring.data import Dataset, batches, heldout_from_seed
from scoring.eval_plan import EvalConfig, own_batches
from scoring.loss_score import (
    Batches,
    LossScoreConfig,
    PagedLoss,
    PeerEval,
    PeerJob,
    deterministic,
    evaluate_peers,
    paged_loss,
)
from scoring.model import LlamaModel
from scoring.ranking import RatingState
from scoring.sampling import history_of, sample_for_evaluation
from scoring.types import Reason
from validator.round.outcomes import PeerWindow, judging_failed
from validator.round.window import WindowSeed
from validator.workers.stats import WorkerStats, in_process

if TYPE_CHECKING:  # the workers import this module's EvalConfig
    from validator.workers.remote import RemoteEvaluation

log = structlog.get_logger(__name__)


class Evaluator(Protocol):
    """`scoring.loss_score.evaluate_peers`, or a stand-in with its signature (tests inject faults)."""

    def __call__(
        self,
        model: LlamaModel,
        jobs: Sequence[PeerJob],
        heldout: Batches,
        *,
        reference: Mapping[str, float],
        cfg: LossScoreConfig,
        before: PagedLoss | None = None,
    ) -> list[PeerEval]: ...


@dataclass(frozen=True, slots=True)
class EvalSetup:
    """What evaluates one window's peers: the model at the window's base, the data, the window and
    its secret seed (which draws the held-out pages and each peer's evaluation pages)."""

    model: LlamaModel
    dataset: Dataset
    window: int
    seed: WindowSeed
    cfg: EvalConfig
    evaluator: Evaluator = evaluate_peers
    # evaluation on workers (validator/workers) instead of `evaluator`, which reach `base` themselves
    remote: RemoteEvaluation | None = None
    base: str = ""  # the model's fingerprint: what workers must reach (needed with `remote`)


@dataclass(frozen=True, slots=True)
class Sample:
    """Which valid peers are evaluated: a fair sample of `budget()` peers (asked when the evaluation
    starts, so the live round can size it by the time left), or exactly `only` (replay: the peers
    the record evaluated). The ratings before the window make the sample fair."""

    ratings: RatingState
    proven: Collection[str]  # before the window: the draw's first tier (scoring/sampling.py)
    budget: Callable[[], int]
    only: Collection[str] | None = None


@dataclass(frozen=True, slots=True)
class HeldOut:
    batches: Sequence[torch.Tensor]
    before: PagedLoss  # the mean and each page's loss (the page test, scoring/page_test.py)

    @property
    def loss_before(self) -> float:
        return self.before.mean


NOT_EVALUATED = HeldOut((), PagedLoss(math.nan, ()))


def heldout(setup: EvalSetup) -> HeldOut:
    """The window's held-out batches and their loss before any update: computed once per window."""
    cfg, dataset = setup.cfg, setup.dataset
    pages = heldout_from_seed(setup.seed.hex, n_pages=cfg.heldout_pages, dataset=dataset)
    data = batches(dataset, pages, cfg.batch_size)
    with deterministic(next(setup.model.parameters()).device):  # the same kernels as the per-peer losses
        return HeldOut(data, paged_loss(setup.model, data))


def evaluate_window(
    setup: EvalSetup,
    peers: Sequence[PeerWindow],
    *,
    held: HeldOut,
    reference: Mapping[str, float],
    sample: Sample,
) -> tuple[list[PeerWindow], list[WorkerStats]]:
    """Evaluate a fair sample of the valid peers (all of them when the budget allows). A peer whose
    evaluation raises is invalid (`internal_error`); the others are scored as usual. Also returns
    what each worker did (one, `in-process`, without a pool): recorded with the window's timings."""
    valid = {p.hotkey: p for p in peers if p.valid}
    if sample.only is None:
        budget, window, seed = sample.budget(), setup.window, setup.seed.number
        history = history_of(sample.ratings.peers, sample.proven, window)
        chosen = sample_for_evaluation(sorted(valid), budget, history, window, seed, setup.cfg.sampling)
    else:
        chosen = sorted(h for h in sample.only if h in valid)
    results, failed, workers = evaluate_chosen(setup, [valid[h] for h in chosen], held, reference)
    by_uid = {result.uid: result for result in results}
    picked = set(chosen)
    out = []
    for p in peers:
        if p.hotkey in picked and p.uid in failed:
            out.append(judging_failed(p, "evaluate", failed[p.uid]))
        elif p.hotkey in picked:
            out.append(_finite_or_rejected(replace(p, evaluation=by_uid[p.uid])))
        else:
            out.append(p)
    return out, workers


def _finite_or_rejected(p: PeerWindow) -> PeerWindow:
    """An evaluation with a loss of NaN or infinity is no score: NaN wins an openskill match and
    reads as the best proof margin, and SQLite refuses it in a NOT NULL column. The update's fault
    (`non_finite_loss`) when the model's losses before it were finite; else the validator's own."""
    e = p.evaluation
    assert e is not None
    if e.loss_rand_step is not None and not math.isfinite(e.loss_rand_step):
        # Not the update's rejection: a non-finite probe loss is already no retention (loss_score.py).
        # It is stored as not measured (NaN reads back as NULL on SQLite, and no JSON can carry it).
        e = replace(e, loss_rand_step=None)
        p = replace(p, evaluation=e)
    before = (e.loss_own_before, e.loss_rand_before)
    after = (e.loss_own_after, e.loss_rand_after, e.score, e.own_gain)
    if all(math.isfinite(x) for x in (*before, *after)):
        return p
    if not all(math.isfinite(x) for x in before):
        failed = judging_failed(p, "evaluate", FloatingPointError("a loss before any update is not finite"))
        return replace(failed, evaluation=None)
    return replace(p.reject(Reason.NON_FINITE_LOSS, "the update's loss is not finite"), evaluation=None)


def evaluate_chosen(
    setup: EvalSetup, chosen: Sequence[PeerWindow], held: HeldOut, reference: Mapping[str, float]
) -> tuple[list[PeerEval], dict[int, Exception], list[WorkerStats]]:
    if setup.remote is not None:  # workers read each peer's archived bytes themselves
        keyed = [(p.uid, p.content_digest) for p in chosen if p.content_digest is not None]
        if len(keyed) != len(chosen):
            raise ValueError("a peer to evaluate on workers is not archived")
        return setup.remote(
            window=setup.window, base=setup.base, heldout_seed=setup.seed.hex,
            loss_before=held.loss_before, reference=reference, peers=keyed,
        )  # fmt: skip
    jobs = []
    for p in chosen:
        assert p.update is not None
        load = partial(own_batches, setup.dataset, setup.window, p.uid, setup.seed.hex, setup.cfg)
        jobs.append(PeerJob(p.uid, p.update.params, load))
    run = partial(
        setup.evaluator,
        setup.model,
        heldout=held.batches,
        reference=reference,
        cfg=setup.cfg.loss,
        before=held.before,
    )
    results, failed = _isolated(run, jobs)
    device = str(next(setup.model.parameters()).device)
    return results, failed, [in_process((r.timings.total_s for r in results), len(failed), device)]


def _isolated(
    run: partial[list[PeerEval]], jobs: Sequence[PeerJob]
) -> tuple[list[PeerEval], dict[int, Exception]]:
    """All jobs in one pass (data prefetched); when that raises, each job alone to find the peers
    that fail. Every evaluation restores the model bit-exactly, so results do not depend on which.

    If every one of several peers fails, the fault is the validator's (device, model), not theirs:
    it raises, and the round boundary retries the window instead of blaming them all."""
    try:
        return run(jobs), {}
    except Exception as e:
        log.warning("evaluation_isolating_peers", peers=len(jobs), error=type(e).__name__)
    results, failed = [], {}
    for job in jobs:
        try:
            results.extend(run([job]))
        except Exception as e:
            failed[job.uid] = e
    if len(jobs) > 1 and len(failed) == len(jobs):
        raise RuntimeError(f"evaluation failed for all {len(jobs)} peers") from next(iter(failed.values()))
    return results, failed
