"""Adversaries beyond the demo's first set (issue 12): copies that dodge the overlap test, split and
stale work, colluding and poisoning directions, and sandbagging. Each sends something that scores
a small positive gain, which is what made them dangerous to an equal-weight aggregate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from validator.demo.sim.context import PeerContext, Submission
from validator.demo.sim.craft import (
    COPY_DELAY_S,
    HONEST_DELAY_S,
    Dense,
    decoded,
    decoded_others,
    direction,
    first_loadable,
    others_pages,
    resign,
    total_norm,
    train_partial,
    with_noise,
)


@dataclass(frozen=True)
class NoisyCopy:
    """Another peer's update plus noise at half each chunk's RMS, compressed again (overlap ≈ 0.3)."""

    name: str = "noisy_copy"
    order: int = 1

    def submit(self, ctx: PeerContext) -> Submission | None:
        others = decoded_others(ctx)
        if not others:
            return None
        g = torch.Generator().manual_seed(ctx.window * 31 + ctx.uid)
        noisy = {}
        for n, t in others[0].items():
            kept = t[t != 0]
            rms = float(kept.norm()) / max(kept.numel(), 1) ** 0.5
            noisy[n] = t + torch.randn(t.shape, generator=g) * 0.5 * rms
        return Submission(ctx.encode(noisy, feedback=False), COPY_DELAY_S)


@dataclass(frozen=True)
class BoostedCopy:
    """Another peer's update plus training of its own on its own assigned pages (`boost` of the
    update's norm), sent at the victim's norm: its own pages gain, so its own page test reads like
    an author's (scoring/authorship.py)."""

    name: str = "boosted_copy"
    order: int = 1
    boost: float = 0.7

    def submit(self, ctx: PeerContext) -> Submission | None:
        others = decoded_others(ctx)
        if not others:
            return None
        victim, own = others[0], ctx.train()
        scale = self.boost * total_norm(victim) / max(total_norm(own), 1e-12)
        mixed = {n: t + scale * own[n] for n, t in victim.items()}
        k = total_norm(victim) / max(total_norm(mixed), 1e-12)
        return Submission(ctx.encode({n: t * k for n, t in mixed.items()}, feedback=False), COPY_DELAY_S)


@dataclass(frozen=True)
class Blend:
    """The average of two other peers' updates."""

    name: str = "blend"
    order: int = 1

    def submit(self, ctx: PeerContext) -> Submission | None:
        others = decoded_others(ctx)
        if len(others) < 2:
            return None
        mixed = {n: (others[0][n] + others[1][n]) / 2 for n in others[0]}
        return Submission(ctx.encode(mixed, feedback=False), COPY_DELAY_S)


@dataclass(frozen=True)
class Split:
    """Two identities, one update: the first trains and sends half its chunks, the second the rest."""

    name: str = "split"
    order: int = 0
    pending: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict, compare=False, repr=False)

    def submit(self, ctx: PeerContext) -> Submission | None:
        other_half = self.pending.pop(ctx.window, None)
        if other_half is not None:
            return Submission(ctx.encode(other_half, feedback=False), HONEST_DELAY_S)
        delta = ctx.train()
        first, second = {}, {}
        for n, t in delta.items():
            mask = (torch.arange(t.numel()) // 4096 % 2 == 0).view(t.shape)
            first[n], second[n] = t * mask, t * ~mask
        self.pending[ctx.window] = second
        return Submission(ctx.encode(first, feedback=False), HONEST_DELAY_S)


@dataclass(frozen=True)
class StaleCopy:
    """Sends another peer's update of the previous window, a few codes changed so the digest differs."""

    name: str = "stale_copy"
    order: int = 1

    def submit(self, ctx: PeerContext) -> Submission | None:
        previous: dict[str, Any] | None = ctx.memory.get("previous")
        ctx.memory["previous"] = first_loadable([d for h, d in ctx.published.items() if h != ctx.hotkey])
        if previous is None:
            return None
        rng = np.random.default_rng(ctx.window)
        tensors = dict(previous)
        for name in [n for n in tensors if n.endswith(".val")]:
            codes = tensors[name].copy()
            codes[rng.random(codes.shape) < 0.01] ^= 0b01010101
            tensors[name] = codes
        return Submission(resign(ctx, tensors), HONEST_DELAY_S)


@dataclass(frozen=True)
class Collude:
    """Honest training plus a hidden direction shared by every colluder, at half the update's norm,
    with a little noise of its own."""

    name: str = "collude"
    order: int = 0
    weight: float = 0.5
    seed: int = 424242

    def submit(self, ctx: PeerContext) -> Submission | None:
        delta = ctx.train()
        size = total_norm(delta)
        hidden, own = direction(ctx, self.seed), direction(ctx, self.seed + ctx.uid * 1000 + ctx.window)
        out = {n: t + size * (self.weight * hidden[n] + 0.1 * own[n]) for n, t in delta.items()}
        return Submission(ctx.encode(out), HONEST_DELAY_S)


@dataclass(frozen=True)
class Poison:
    """Honest training plus one persistent direction at 10 % of the update's norm, every window."""

    name: str = "poison"
    order: int = 0
    weight: float = 0.1
    seed: int = 777

    def submit(self, ctx: PeerContext) -> Submission | None:
        delta = ctx.train()
        size, hidden = total_norm(delta), direction(ctx, self.seed)
        return Submission(ctx.encode({n: t + size * self.weight * hidden[n] for n, t in delta.items()}))


@dataclass(frozen=True)
class Sandbag:
    """A quarter of the training, rescaled to look like a full update."""

    name: str = "sandbag"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        delta = train_partial(ctx, steps_fraction=0.25)
        return Submission(ctx.encode({n: t * 4.0 for n, t in delta.items()}), HONEST_DELAY_S)


@dataclass(frozen=True)
class SandbagMatched:
    """A quarter of the training, rescaled to the median norm of the updates other peers already
    published this window: an honest-looking norm, so nothing sits above the honest band."""

    name: str = "sandbag_matched"
    order: int = 1  # after the peers whose norms it matches

    def submit(self, ctx: PeerContext) -> Submission | None:
        delta = train_partial(ctx, steps_fraction=0.25)
        others = sorted(total_norm(d) for d in decoded_others(ctx))
        scale = 4.0
        for _ in range(3 if others else 0):  # what it sends holds its error feedback too: refine
            sent = self._sent_norm(ctx, delta, scale)
            scale *= others[len(others) // 2] / sent if sent > 0.0 else 1.0
        return Submission(ctx.encode({n: t * scale for n, t in delta.items()}), HONEST_DELAY_S)

    @staticmethod
    def _sent_norm(ctx: PeerContext, delta: Dense, scale: float) -> float:
        """The norm of what `ctx.encode(delta × scale)` would send, its error feedback untouched."""
        ef: Dense = ctx.memory.get("error_feedback", {})
        beta = ctx.tools.codec.error_feedback
        trial = {n: t * scale + (beta * ef[n] if n in ef else 0.0) for n, t in delta.items()}
        return total_norm(decoded(ctx, ctx.encode(trial, feedback=False)))


@dataclass(frozen=True)
class Shrunk:
    """Honest training, sent at half its size. Harmless alone (real work, weighted by its gain), but a
    smaller step is more linear: several such identities lifted a median retention taken over every
    update and framed honest peers as overshooting (bench_fidelity's `shrunk` scenario)."""

    name: str = "shrunk"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        return Submission(ctx.encode({n: t * 0.5 for n, t in ctx.train().items()}), HONEST_DELAY_S)


@dataclass(frozen=True)
class Lapsed:
    """Trains on its own pages until its training is proven (three windows), then, as `lazy` does, on
    pages assigned to somebody else: a proof earned once must not carry a peer that stopped."""

    name: str = "lapsed"
    order: int = 0
    honest_windows: int = 3

    def submit(self, ctx: PeerContext) -> Submission | None:
        done = ctx.count_window()
        pages = None if done < self.honest_windows else others_pages(ctx)
        return Submission(ctx.encode(ctx.train(pages)), HONEST_DELAY_S)


@dataclass(frozen=True)
class ConsensusEcho:
    """Trains honestly until its training is proven (three windows), then sends the mean of the
    updates the others published this window, re-compressed as its own (scoring/echo.py): the
    window's consensus, which no pairwise copy check sees. At the honest peers' upload time."""

    name: str = "echo"
    order: int = 1  # after the peers it averages
    honest_windows: int = 3
    noise: float = 0.0  # a fresh random direction added each window, × the mean's norm: a share of its own
    seed: int = 31337

    def submit(self, ctx: PeerContext) -> Submission | None:
        done = ctx.count_window()
        others = decoded_others(ctx) if done >= self.honest_windows else []
        if not others:
            return Submission(ctx.encode(ctx.train()), HONEST_DELAY_S)
        mean = {n: torch.stack([o[n] for o in others]).mean(0) for n in others[0]}
        if self.noise > 0.0:
            size, fresh = total_norm(mean), direction(ctx, self.seed + 1000 * ctx.window + ctx.uid)
            mean = {n: t + self.noise * size * fresh[n] for n, t in mean.items()}
        return Submission(ctx.encode(mean, feedback=False), HONEST_DELAY_S)


@dataclass(frozen=True)
class Frontrun:
    """Computes another peer's update before that peer publishes it, and publishes it first: every
    input of an honest update is public (the base, the victim's assigned pages, the recipe), and the
    victim's error feedback is replayed from its first window in a buffer of its own. By upload time
    the victim is the later sender of its own update. For `honest_windows` windows it also trains
    on its own pages and sends that instead (a proof of its own); `victim` is a uid, which publishes
    from the frontrunner's window `victim_joins` on (a newcomer: validator/demo/sim/behaviours.py)."""

    name: str = "frontrun"
    order: int = 0
    victim: int = 1
    honest_windows: int = 0
    victim_joins: int = 0
    delay_s: float = HONEST_DELAY_S / 5
    noise: float = 0.0  # dense noise at this × the stolen update's RMS: its positions then look its own

    def submit(self, ctx: PeerContext) -> Submission | None:
        done = ctx.count_window()
        stolen = None
        if done >= self.victim_joins:
            delta = with_noise(
                ctx.train(ctx.assigned(uid=self.victim)), self.noise, ctx.window * 977 + ctx.uid
            )
            stolen = ctx.encode(delta, buffer="victim_feedback")
        if done < self.honest_windows or stolen is None:
            return Submission(ctx.encode(ctx.train()), HONEST_DELAY_S)
        return Submission(stolen, self.delay_s)


# twice poison's share, in a direction of its own: under the norm band (poison at half the norm is
# kept out by `max_inflation`), with more of it persisting across windows (docs/fidelity-log.md)
POISON_STRONG = Poison(name="poison_strong", weight=0.2, seed=778)
# an echo with noise of its own at twice the norm of the mean it sends: an honest-looking own share
ECHO_NOISY = ConsensusEcho(name="echo_noisy", noise=2.0)

# a frontrunner that proves training of its own first (three windows), then sends the victim's update
FRONTRUN_PROVEN = Frontrun(name="frontrun_proven", honest_windows=3)
# the same against a newcomer that joins as the frontrunner has proven itself (uid 1 must be a
# `newcomer`: not in the mixed run, whose uid 1 publishes from the first window)
FRONTRUN_NEWCOMER = Frontrun(name="frontrun_newcomer", honest_windows=3, victim_joins=3)
# the proven frontrunner with noise at 1× the update's RMS: no copy finding, no link (open, issue 12)
FRONTRUN_NOISY = Frontrun(name="frontrun_noisy", honest_windows=3, noise=1.0)

ADVERSARIES = (
    NoisyCopy(), BoostedCopy(), Blend(), Split(), StaleCopy(), Collude(), Poison(), Sandbag(),
    SandbagMatched(), Shrunk(), POISON_STRONG, Lapsed(), ConsensusEcho(), ECHO_NOISY, Frontrun(),
    FRONTRUN_PROVEN,
)  # fmt: skip
