"""Which peers to evaluate this window when the budget cannot cover all (DESIGN.md §3.4, with tiers).

DESIGN draws one fair sample of every valid peer, binned by rating and favouring peers not
evaluated recently. Fair over identities is unfair to work: registering an identity is cheap, and
a crowd of identities sending fresh noise (which passes every check made before evaluation) took
its share of the budget, B/N, in every window. Measured with `benchmarks/bench_sampling.py` (a
model of the ratings with the real proof: four proven honest peers, 200 noise identities, an honest
newcomer registering after them, B = 8, 10 seeds × 150 windows), an honest peer was evaluated in
4 % of windows, and the newcomer took a median of 58 windows to prove its training (2 of 10 runs
never within 120); with the tiers, every window and 49 (README, *Where this departs*). So the
draw is in tiers:

1. **proven peers** (scoring/proof.py): the peers whose work the network uses, drawn as DESIGN
   says (rating bins, staleness), from the budget less the unproven peers' reserve;
2. **unproven peers**: a reserve of `unproven_share` of the budget (one slot at least), and what
   the proven peers leave, in this order: those whose own pages have gained so far (the proof's
   page-test z at least `promising_z`), the strongest first (an honest newcomer after its first
   evaluation, a trial that fell short, a proof lost); then those never evaluated, first come
   first served (the longest rated first: an identity registered after a newcomer cannot delay
   it); then those still short of `trial_evaluations`, the strongest first; then the rest (and
   those never evaluated whose last submission was invalid), staleness-weighted. An identity that
   sends no training of its own takes one evaluation in its turn and then waits behind everyone
   whose pages gain: the budget it holds is bounded by what it pays to register, not by how long
   it stays. A rating a copy penalty wiped waits with the rest too: its turn was taken (before, a
   penalised copier was "never evaluated" again, first in the queue by the windows it had been
   rated, and took a reserve slot in every window it copied);
3. **banned peers** (scoring/ranking.py): from what is left. They are neither aggregated nor matched.

Every draw is a pure function of (seed, window) and the ratings before the window: replay reproduces it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from scoring.page_test import stouffer
from scoring.ranking import PeerRating


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    bins: int = 3
    max_staleness: int = 10  # windows since last evaluated count up to this (never evaluated: max)
    unproven_share: float = 0.25  # of the budget kept for unproven peers when there are some
    trial_evaluations: int = 3  # the proof's minimum (scoring/rating_config.py)
    # about 16 % of identities whose pages read t ~ N(0, 1) reach it; an honest peer's 2.3 a window
    # (docs/fidelity-log.md) passes it in its first
    promising_z: float = 1.0

    def __post_init__(self) -> None:
        if self.bins < 1 or self.max_staleness < 0 or self.trial_evaluations < 0:
            raise ValueError("need bins >= 1, max_staleness >= 0 and trial_evaluations >= 0")
        if not 0.0 <= self.unproven_share <= 1.0:
            raise ValueError("unproven_share must be in [0, 1]")


@dataclass(frozen=True, slots=True)
class History:
    """What the draw knows of the candidates, read from their ratings before the window: the rating
    that ranks them, the window each was last evaluated in (absent: never), and their standing."""

    ratings: Mapping[str, float] = field(default_factory=dict)
    last_evaluated: Mapping[str, int] = field(default_factory=dict)
    proven: Collection[str] = frozenset()
    banned: Collection[str] = frozenset()
    evaluations: Mapping[str, int] = field(default_factory=dict)
    seen: Mapping[str, int] = field(default_factory=dict)  # windows rated: the trial queue's order
    evidence: Mapping[str, float] = field(default_factory=dict)  # the proof's page-test z (absent: none)
    # no evaluation on record, but their last submission was invalid (a non-finite loss, a failed
    # evaluation) or a copy penalty wiped the record: they wait with the rest, or an identity sending
    # such updates held the head of the queue
    failed: Collection[str] = frozenset()


def history_of(ratings: Mapping[str, PeerRating], proven: Collection[str], window: int) -> History:
    """What the draw reads of each rated peer before `window`; `proven`: those whose proof holds
    (scoring/proof.py `proven`, which needs the rating's config)."""
    return History(
        ratings={h: r.ordinal for h, r in ratings.items()},
        last_evaluated={h: r.last_evaluated for h, r in ratings.items() if r.last_evaluated is not None},
        proven=frozenset(proven),
        banned=frozenset(h for h, r in ratings.items() if r.banned(window)),
        evaluations={h: r.evaluations for h, r in ratings.items()},
        seen={h: r.windows_seen for h, r in ratings.items()},
        evidence={
            h: z for h, r in ratings.items() if (z := stouffer(r.proof_sum, r.proof_weight)) is not None
        },
        failed=frozenset(
            h for h, r in ratings.items() if r.evaluations == 0 and (r.gated or r.last_evaluated is not None)
        ),
    )


def sample_for_evaluation(
    candidates: Sequence[str],
    budget: int,
    history: History,
    window: int,
    seed: int,
    cfg: SamplingConfig = SamplingConfig(),
) -> list[str]:
    """The hotkeys to evaluate, sorted; all of them when `budget` allows (module docstring)."""
    if budget < 0 or len(set(candidates)) != len(candidates):
        raise ValueError("need budget >= 0 and distinct candidates")
    if budget >= len(candidates):
        return sorted(candidates)
    rng = np.random.default_rng([seed, window])
    banned = sorted(h for h in candidates if h in history.banned)
    proven = sorted(h for h in candidates if h in history.proven and h not in history.banned)
    unproven = sorted(set(candidates) - set(banned) - set(proven))
    reserve = min(len(unproven), max(1, round(budget * cfg.unproven_share))) if unproven else 0
    chosen = _binned(proven, min(len(proven), budget - reserve), history, window, rng, cfg)
    left = budget - len(chosen)
    chosen += _unproven_queue(unproven, history, window, rng, cfg)[:left]
    left = budget - len(chosen)
    chosen += _weighted_order(banned, history, window, rng, cfg)[:left]
    return sorted(chosen)


def _binned(
    members: list[str], k: int, history: History, window: int, rng: np.random.Generator, cfg: SamplingConfig
) -> list[str]:
    """DESIGN's draw: `members` ranked by rating, cut into bins that share `k` by size, each bin
    drawn without replacement with weight 1 + staleness."""
    if k <= 0:
        return []
    ranked = sorted(members, key=lambda h: (-history.ratings.get(h, 0.0), h))
    bins = [list(b) for b in np.array_split(np.array(ranked, dtype=object), min(cfg.bins, len(ranked)))]
    chosen: list[str] = []
    for group, quota in zip(bins, _split_budget([len(b) for b in bins], k), strict=True):
        chosen.extend(_weighted_order(group, history, window, rng, cfg)[:quota])
    return chosen


def _unproven_queue(
    members: list[str], history: History, window: int, rng: np.random.Generator, cfg: SamplingConfig
) -> list[str]:
    """Every unproven peer in the order it is served (module docstring)."""
    ties = dict(zip(members, rng.random(len(members)).tolist(), strict=True))

    def z(h: str) -> float:
        return history.evidence.get(h, 0.0)

    def place(h: str) -> tuple[int, float, float]:
        evaluations = history.evaluations.get(h, 0)
        if evaluations > 0 and z(h) >= cfg.promising_z:
            return 0, -z(h), ties[h]
        if evaluations == 0:
            return 1, -history.seen.get(h, 0), ties[h]
        return 2, -z(h), ties[h]

    count = history.evaluations.get
    tried = {
        h
        for h in members
        if h in history.failed or (place(h)[0] == 2 and count(h, 0) >= cfg.trial_evaluations)
    }
    queued = sorted((h for h in members if h not in tried), key=place)
    return queued + _weighted_order(sorted(tried), history, window, rng, cfg)


def _weighted_order(
    members: list[str], history: History, window: int, rng: np.random.Generator, cfg: SamplingConfig
) -> list[str]:
    """`members` in the order of a draw without replacement weighted by 1 + staleness
    (Efraimidis–Spirakis: by decreasing u^(1/w)); its first k are a weighted draw of k."""
    weights = np.array([_staleness(h, history, window, cfg) for h in members], dtype=np.float64)
    keys = rng.random(len(members)) ** (1.0 / weights)
    return [members[int(i)] for i in np.argsort(-keys, kind="stable")]


def _staleness(hotkey: str, history: History, window: int, cfg: SamplingConfig) -> float:
    last = history.last_evaluated.get(hotkey)
    waited = cfg.max_staleness if last is None else min(max(window - last, 0), cfg.max_staleness)
    return 1.0 + waited


def _split_budget(sizes: Sequence[int], budget: int) -> list[int]:
    """Largest-remainder shares of `budget` proportional to `sizes` (ties to earlier bins)."""
    total = sum(sizes)
    exact = [budget * s / total for s in sizes]
    quotas = [int(e) for e in exact]
    by_remainder = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in by_remainder[: budget - sum(quotas)]:
        quotas[i] += 1
    return quotas
