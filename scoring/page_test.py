"""Proof of training that knows its own noise: a per-window test over evaluated pages.

An update trained on the peer's assigned pages lowers the loss on them by more than on pages it
never saw. How much more, against how noisy the pages are, is a two-sample question: Student's t of
the per-page relative gains on the peer's evaluated pages against the window's held-out pages, with
the two sides' variance pooled (`page_t`). A peer that does not train on its own pages reads
t ~ 0 ± 1 in every window, whatever the size of its gains: its own pages are drawn like held-out
ones, so both sides have one variance. The relative margin `(own − score) / |score|`
(scoring/proof.py) is a ±1 coin flip once held-out gains near 0, and it let a lazy peer prove
training late in long demo runs.

Pooled, not Welch's: a peer that trains on some of its pages gains on those far more than on the
rest, and Welch's t divides by that spread of its own side, so it cannot exceed about 1.5 with two
trained pages of eight however much they gain. Measured (README, *Scoring fidelity*, fifteenth
round): the ¼-pages peer of `bench_fidelity`'s graded run read a mean t of 1.02 with Welch's and lost
its proof in two windows under seed 2; pooled, 1.15 and none; lazy peers read 0.03 ± 1.1 either way.

The ranking folds t into a discounted Stouffer sum (`fold`, `stouffer`): under no own-page effect it
reads N(0, 1) after any number of evaluations, while honest peers' t add up. Each evaluation's t is
clipped to ±`clip`, so one window cannot carry a proof for long, and older evaluations are discounted
by `decay`, so a peer that stops training on its own pages loses the proof in bounded time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, variance


@dataclass(frozen=True, slots=True)
class PageLosses:
    """Token-mean loss per evaluated page: the peer's own pages and the window's held-out pages,
    before and after its update at β (scoring/loss_score.py)."""

    own_before: tuple[float, ...]
    own_after: tuple[float, ...]
    heldout_before: tuple[float, ...]
    heldout_after: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class PageTestConfig:
    """`z`: the discounted Stouffer sum a proven peer reaches; `clip`: one evaluation's most say;
    `decay`: the weight of the evaluation before relative to this one (a memory of ~1/(1 − decay)).
    Calibrated on demo runs (docs/fidelity-log.md, eleventh round): from their fourth
    evaluation honest and graded peers read 1.58 and more; `lazy` stayed under 1.3 except in two
    windows of a 24-window mixed run (1.68). At decay 0.9 the ⅒-steps peer dipped to 1.63 and lost
    its proof at 1.645. Under no effect, 1.5 is reached at least once in 8 windows by 16.5 % of
    peers (simulated): the margin rules (scoring/proof.py) must hold as well."""

    z: float = 1.5
    clip: float = 3.0
    decay: float = 0.95

    def __post_init__(self) -> None:
        if self.clip <= 0 or not 0.0 < self.decay <= 1.0:
            raise ValueError("need clip > 0 and 0 < decay <= 1")


def page_t(pages: PageLosses) -> float | None:
    """Student's two-sample t of the relative per-page gains, own pages against held-out ones (each
    relative to its set's mean loss before, as `score` and `own_gain` are), the variance pooled over
    both sides; None when it is not defined (fewer than two pages on a side, a non-finite loss, or
    no spread at all)."""
    own = _relative_gains(pages.own_before, pages.own_after)
    held = _relative_gains(pages.heldout_before, pages.heldout_after)
    if own is None or held is None:
        return None
    n_own, n_held = len(own), len(held)
    pooled = ((n_own - 1) * variance(own) + (n_held - 1) * variance(held)) / (n_own + n_held - 2)
    spread = pooled * (1.0 / n_own + 1.0 / n_held)
    if not spread > 0.0 or not math.isfinite(spread):
        return None
    return (fmean(own) - fmean(held)) / math.sqrt(spread)


def own_t(pages: PageLosses | None) -> float | None:
    """What an evaluation adds to the page test: its t; 0 (no evidence) when the pages were measured
    and t is not defined, so no update can leave the test out by making it undefined; None only
    without page losses (evaluations stored before them)."""
    if pages is None:
        return None
    t = page_t(pages)
    return 0.0 if t is None else t


def _relative_gains(before: tuple[float, ...], after: tuple[float, ...]) -> list[float] | None:
    if len(before) != len(after) or len(before) < 2:
        return None
    if not all(math.isfinite(x) for x in (*before, *after)):
        return None
    scale = fmean(before)
    if not scale > 0.0:
        return None
    return [(b - a) / scale for b, a in zip(before, after, strict=True)]


def fold(total: float, weight: float, t: float, cfg: PageTestConfig) -> tuple[float, float]:
    """The discounted sum and its variance under the null after one more window's t."""
    t = max(-cfg.clip, min(cfg.clip, t))
    return cfg.decay * total + t, cfg.decay * cfg.decay * weight + 1.0


def stouffer(total: float, weight: float) -> float | None:
    """The discounted Stouffer statistic; None before any window had a t."""
    return total / math.sqrt(weight) if weight > 0.0 else None
