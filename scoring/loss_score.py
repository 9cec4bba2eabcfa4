"""LossScore (DESIGN.md §6): how much a peer's update lowers the loss on its own and on held-out pages.

Each update is applied to the shared model in place and sparsely (θ[idx] ← θ[idx] − β·c·v, with c the
median-norm clip factor), three forward passes are run, and the saved originals are written back, so
the model is bit-identical after any number of peers. Nothing per peer is dense.

A fourth pass measures the held-out loss with the update applied at a larger step, `probe_factor` × β
(the default outer step): `retention` compares the update's gain there with its gain at β. A short
training scaled up to an honest norm is steep along the first gradient directions and keeps markedly
less of it than updates made by the recipe (scoring/selection.py).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from scoring.clipping import clip_factors
from scoring.consensus import OUTER_LR
from scoring.model import LlamaModel, autocast
from scoring.page_test import PageLosses
from scoring.threads import pinned_threads
from scoring.types import SparseParam

Batches = Sequence[torch.Tensor]


@dataclass(frozen=True, slots=True)
class LossScoreConfig:
    """β = eval_lr_factor × outer_lr is the step the update is evaluated at; the fourth pass applies
    it at `probe_factor` × β (5: the default outer step, 0.4, where the retention rule was measured;
    the demo's outer step is 12.5 β, where a single update's gain is far from linear)."""

    eval_lr_factor: float = 0.2
    outer_lr: float = OUTER_LR
    probe_factor: float = 5.0

    def __post_init__(self) -> None:
        if self.eval_lr_factor <= 0 or self.outer_lr <= 0 or self.probe_factor <= 1:
            raise ValueError("eval_lr_factor and outer_lr must be positive, probe_factor above 1")

    @property
    def beta(self) -> float:
        return self.eval_lr_factor * self.outer_lr


@dataclass(frozen=True, slots=True)
class Timings:
    """Seconds spent per stage for one peer; `wait_s` is time blocked on its data loading."""

    wait_s: float
    apply_s: float
    forward_s: float
    restore_s: float
    total_s: float


@dataclass(frozen=True, slots=True)
class PeerEval:
    uid: int
    loss_own_before: float
    loss_own_after: float
    loss_rand_before: float
    loss_rand_after: float
    score: float
    own_gain: float
    indicator: int
    timings: Timings
    loss_rand_step: float | None = None  # held-out loss with the update applied at the probe step
    pages: PageLosses | None = None  # the same losses per page (scoring/page_test.py), at β


def retention(e: PeerEval) -> float | None:
    """Held-out gain at the probe step ÷ held-out gain at β: `probe_factor` (5) for a loss linear
    along the update, less the more the update overshoots. None without a positive gain at β.
    Only its ratio to the window's other updates is used, so the step sizes need not be known."""
    gain = e.loss_rand_before - e.loss_rand_after
    if e.loss_rand_step is None or not math.isfinite(e.loss_rand_step) or not gain > 0.0:
        return None
    return (e.loss_rand_before - e.loss_rand_step) / gain


@dataclass(frozen=True, slots=True)
class PeerJob:
    """One peer to evaluate: its decoded update and a loader for its assigned evaluation batches."""

    uid: int
    update: Mapping[str, SparseParam]
    load_own: Callable[[], Batches]


@dataclass(frozen=True, slots=True)
class SavedValues:
    """Original values at the coordinates an update touched: what `restore` writes back."""

    flats: tuple[torch.Tensor, ...]
    indices: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]


def score_losses(
    own_before: float, own_after: float, rand_before: float, rand_after: float
) -> tuple[float, float, int]:
    """(score, own_gain, indicator): relative improvements and the proof-of-training sign."""
    score = (rand_before - rand_after) / rand_before
    own_gain = (own_before - own_after) / own_before
    return score, own_gain, 1 if own_gain > score else -1


@dataclass(frozen=True, slots=True)
class PagedLoss:
    """A token-mean loss and the token-mean loss of each page (one row of a batch is one page)."""

    mean: float
    pages: tuple[float, ...]


def mean_loss(model: LlamaModel, batches: Batches) -> float:
    """Token-mean next-token cross-entropy over all batches (each (B, T+1) int64), inference mode."""
    return paged_loss(model, batches, per_page=False).mean


def paged_loss(model: LlamaModel, batches: Batches, *, per_page: bool = True) -> PagedLoss:
    """`mean_loss` and the same per page, from one forward pass (`per_page` False: the mean alone,
    as the probe step and the demo's held-out figure need)."""
    device = next(model.parameters()).device
    total, count, pages = 0.0, 0, []
    with torch.inference_mode():
        for batch in batches:
            batch = batch.to(device, non_blocking=True)
            with autocast(device):
                logits = model(batch[:, :-1])  # (B, T, V)
            targets = batch[:, 1:]
            # cross_entropy is nll_loss of log_softmax: its sum is the same bits, and the per-token
            # losses come from the same log-probabilities
            logp = logits.float().flatten(0, 1).log_softmax(-1)
            total += float(F.nll_loss(logp, targets.flatten(), reduction="sum"))
            if per_page:
                per_token = F.nll_loss(logp, targets.flatten(), reduction="none")
                pages.extend(per_token.view(targets.shape).double().mean(1).tolist())
            count += targets.numel()
    if count == 0:
        raise ValueError("no tokens to evaluate")
    return PagedLoss(total / count, tuple(pages))


def apply_sparse(
    model: LlamaModel, update: Mapping[str, SparseParam], factors: Mapping[str, float], beta: float
) -> SavedValues:
    """θ[idx] ← θ[idx] − (β·factor)·values for each parameter, in place; returns the originals."""
    params = dict(model.named_parameters())
    unknown = update.keys() - params.keys()
    if unknown:
        raise KeyError(f"update names parameters the model lacks: {sorted(unknown)[:5]}")
    flats: list[torch.Tensor] = []
    indices: list[torch.Tensor] = []
    originals: list[torch.Tensor] = []
    try:
        with torch.no_grad():
            for name, sp in update.items():
                flat = params[name].detach().view(-1)
                idx, values = sp.indices, sp.values
                if idx.device != flat.device:
                    idx, values = (
                        idx.to(flat.device, non_blocking=True),
                        values.to(flat.device, non_blocking=True),
                    )
                orig = flat.index_select(0, idx)  # a copy: the exact bits to restore
                # Same arithmetic as aggregation (orig − (β·c)·v in fp32), so the evaluated model is the
                # one aggregation would produce at this step.
                new = orig.float() - values * (beta * factors.get(name, 1.0))
                flat.index_copy_(0, idx, new if new.dtype == flat.dtype else new.to(flat.dtype))
                flats.append(flat)
                indices.append(idx)
                originals.append(orig)
    except BaseException:
        # A malformed parameter midway must not leave the shared model half-updated.
        restore(SavedValues(tuple(flats), tuple(indices), tuple(originals)))
        raise
    return SavedValues(tuple(flats), tuple(indices), tuple(originals))


def restore(saved: SavedValues) -> None:
    """Write the saved originals back: the model is bit-identical to before `apply_sparse`."""
    with torch.no_grad():
        for flat, idx, orig in zip(saved.flats, saved.indices, saved.values, strict=True):
            flat.index_copy_(0, idx, orig)


@contextlib.contextmanager
def deterministic(device: torch.device) -> Iterator[None]:
    """Deterministic kernels for the duration (so a second process reproduces the losses bit for bit).

    On CUDA only warn: strict mode raises in cuBLAS unless CUBLAS_WORKSPACE_CONFIG was set at start-up.
    """
    before, before_warn = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")
    try:
        with pinned_threads():  # a CPU reduction's bits depend on the thread count (scoring/threads.py)
            yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=before_warn)


@dataclass(frozen=True, slots=True)
class Baseline:
    """What every peer of a window is measured against: the held-out batches and their loss under
    the unchanged model, the clip reference and the step."""

    heldout: Batches
    loss_before: float
    reference: Mapping[str, float]
    cfg: LossScoreConfig
    # each held-out page's loss before; empty only in a Baseline built by hand (benchmarks): no pages
    heldout_pages: tuple[float, ...] = ()


def evaluate_peer(
    model: LlamaModel, job: PeerJob, own: Batches, base: Baseline, *, wait_s: float = 0.0
) -> PeerEval:
    """The four forward passes for one peer around two sparse apply/restores (at β, then at the
    probe step)."""
    t0 = time.perf_counter()
    own_before = paged_loss(model, own)
    factors = clip_factors(job.update, base.reference)
    t1 = time.perf_counter()
    saved = apply_sparse(model, job.update, factors, base.cfg.beta)
    t2 = time.perf_counter()
    try:
        own_after = paged_loss(model, own)
        rand_after = paged_loss(model, base.heldout)
    finally:
        t3 = time.perf_counter()
        restore(saved)
    t4 = time.perf_counter()
    saved = apply_sparse(model, job.update, factors, base.cfg.beta * base.cfg.probe_factor)
    t5 = time.perf_counter()
    try:
        rand_step = mean_loss(model, base.heldout)
    finally:
        t6 = time.perf_counter()
        restore(saved)
    t7 = time.perf_counter()
    score, own_gain, indicator = score_losses(
        own_before.mean, own_after.mean, base.loss_before, rand_after.mean
    )
    pages = (
        PageLosses(own_before.pages, own_after.pages, base.heldout_pages, rand_after.pages)
        if base.heldout_pages
        else None
    )
    apply_s, forward_s, restore_s = (
        (t2 - t1) + (t5 - t4),
        (t1 - t0) + (t3 - t2) + (t6 - t5),
        (t4 - t3) + (t7 - t6),
    )
    timings = Timings(wait_s, apply_s, forward_s, restore_s, t7 - t0 + wait_s)
    return PeerEval(
        job.uid, own_before.mean, own_after.mean, base.loss_before, rand_after.mean, score, own_gain,
        indicator, timings, rand_step, pages,
    )  # fmt: skip


def evaluate_peers(
    model: LlamaModel,
    jobs: Sequence[PeerJob],
    heldout: Batches,
    *,
    reference: Mapping[str, float],
    cfg: LossScoreConfig,
    before: PagedLoss | None = None,
) -> list[PeerEval]:
    """Evaluate peers in order, sharing the held-out losses `before` (computed here unless given).

    The next peer's batches load on a worker thread while the current peer is evaluated.
    """
    with deterministic(next(model.parameters()).device):
        held = paged_loss(model, heldout) if before is None else before
        base = Baseline(heldout, held.mean, reference, cfg, held.pages)
        results: list[PeerEval] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lossscore-data") as pool:
            pending: Future[Batches] | None = pool.submit(jobs[0].load_own) if jobs else None
            for i, job in enumerate(jobs):
                assert pending is not None
                t = time.perf_counter()
                own = pending.result()
                wait = time.perf_counter() - t
                pending = pool.submit(jobs[i + 1].load_own) if i + 1 < len(jobs) else None
                results.append(evaluate_peer(model, job, own, base, wait_s=wait))
        return results
