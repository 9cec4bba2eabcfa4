"""The built-in peer behaviours of the demo: honest peers of graded quality, and ways to cheat or fail.

Graded honest peers do a known fraction of the work (`HONEST_CONTRIBUTION`), so the benchmark can
check that ratings follow true contribution."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import numpy as np
import safetensors.numpy
import torch

from scoring.model import LlamaModel
from validator.demo.sim.adversaries import ADVERSARIES, FRONTRUN_NEWCOMER, FRONTRUN_NOISY
from validator.demo.sim.context import Behaviour, PeerContext, Submission
from validator.demo.sim.craft import (
    COPY_DELAY_S,
    HONEST_DELAY_S,
    first_loadable,
    others_pages,
    resign,
    train_partial,
)


@dataclass(frozen=True)
class Honest:
    name: str = "honest"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        return Submission(ctx.encode(ctx.train()), HONEST_DELAY_S)


@dataclass(frozen=True)
class Newcomer:
    """Honest from its `joins`-th window on, publishing nothing before: a peer that joins a subnet
    whose other peers have proven their training already."""

    name: str = "newcomer"
    order: int = 0
    joins: int = 3

    def submit(self, ctx: PeerContext) -> Submission | None:
        return None if ctx.count_window() < self.joins else Honest().submit(ctx)


@dataclass(frozen=True)
class Graded:
    """Honest, but with a fraction of the inner steps or of the assigned pages."""

    name: str
    steps_fraction: float = 1.0
    pages_fraction: float = 1.0
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        return Submission(
            ctx.encode(train_partial(ctx, self.steps_fraction, self.pages_fraction)), HONEST_DELAY_S
        )


# Measured at the demo's sizing (H = 20), held-out gain saturates above ~10 inner steps (3/4 and
# 1/2 of the steps gained as much as all of them, half the pages too), so the grades are far apart.
GRADED = (
    Graded("honest_quarter", steps_fraction=0.25),
    Graded("honest_tenth", steps_fraction=0.1),
    Graded("honest_quarter_pages", pages_fraction=0.25),
)
# The share of a full honest peer's work each honest behaviour does (pages count like steps).
HONEST_CONTRIBUTION = {"honest": 1.0, "newcomer": 1.0} | {
    g.name: g.steps_fraction * g.pages_fraction for g in GRADED
}


@dataclass(frozen=True)
class Lazy:
    """Trains for real, but on pages assigned to somebody else (cheaper data, no proof of work)."""

    name: str = "lazy"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        return Submission(ctx.encode(ctx.train(others_pages(ctx))), HONEST_DELAY_S)


@dataclass(frozen=True)
class Scaled:
    """An honest update blown up ×100, hoping a bigger step scores better."""

    name: str = "scaled"
    order: int = 0
    factor: float = 100.0

    def submit(self, ctx: PeerContext) -> Submission | None:
        delta = {n: d * self.factor for n, d in ctx.train().items()}
        return Submission(ctx.encode(delta, feedback=False), HONEST_DELAY_S)


@dataclass(frozen=True)
class Late:
    name: str = "late"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        return Submission(ctx.encode(ctx.train()), ctx.tools.put_window_s + 60.0)


@dataclass(frozen=True)
class Stale:
    """Keeps training from the model it saw a window ago, signing that old base."""

    name: str = "stale"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        old: tuple[str, LlamaModel] | None = ctx.memory.get("old")
        ctx.memory["old"] = (ctx.base, copy.deepcopy(ctx.model))  # the global model moves on in place
        if old is None:
            return Submission(ctx.encode(ctx.train()), HONEST_DELAY_S)
        base, model = old
        return Submission(ctx.encode(ctx.train(model=model), base=base), HONEST_DELAY_S)


@dataclass(frozen=True)
class Replay:
    """Re-sends its previous window's file, byte for byte."""

    name: str = "replay"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        previous: bytes | None = ctx.memory.get("previous")
        data = previous if previous is not None else ctx.encode(ctx.train())
        ctx.memory["previous"] = data
        return Submission(data, HONEST_DELAY_S)


@dataclass(frozen=True)
class FreeRider:
    """Sends the last global aggregate as its own work (nothing in the first window)."""

    name: str = "free_rider"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        if ctx.last_aggregate is None:
            return None
        return Submission(ctx.encode(ctx.last_aggregate), HONEST_DELAY_S)


@dataclass(frozen=True)
class Copycat:
    """Takes another peer's fresh submission, perturbs some codes so the digest differs, re-signs it."""

    name: str = "copycat"
    order: int = 1
    perturb: float = 0.1

    def submit(self, ctx: PeerContext) -> Submission | None:
        # the first peer to publish (peers publish by uid): a copier wants the freshest real work
        tensors = first_loadable([data for h, data in ctx.published.items() if h != ctx.hotkey])
        if tensors is None:
            return None
        rng = np.random.default_rng(ctx.window)
        for name in [n for n in tensors if n.endswith(".val")]:
            codes = tensors[name].copy()
            flip = rng.random(codes.shape) < self.perturb
            codes[flip] ^= 0b01010101  # toggles magnitude bits, keeps every sign
            tensors[name] = codes
        return Submission(resign(ctx, tensors), COPY_DELAY_S)


@dataclass(frozen=True)
class Noise:
    """Random values at random coordinates, with the sparsity and norm of a real update."""

    name: str = "noise"
    order: int = 0
    scale: float = 1e-3

    def submit(self, ctx: PeerContext) -> Submission | None:
        g = torch.Generator().manual_seed(ctx.window * 7919 + ctx.uid)
        delta = {n: torch.randn(p.shape, generator=g) * self.scale for n, p in ctx.model.named_parameters()}
        return Submission(ctx.encode(delta, feedback=False), HONEST_DELAY_S)


@dataclass(frozen=True)
class Malformed:
    """Garbage, a truncated file, or a file whose codebook holds NaN, in turn."""

    name: str = "malformed"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        rng = random.Random(ctx.window)
        kind = ctx.window % 3
        if kind == 0:
            return Submission(rng.randbytes(4096), HONEST_DELAY_S)
        delta = {n: torch.full(p.shape, 1e-3) for n, p in ctx.model.named_parameters()}
        good = ctx.encode(delta, feedback=False)
        if kind == 1:
            return Submission(good[: len(good) // 2], HONEST_DELAY_S)
        tensors = dict(safetensors.numpy.load(good))
        first_lut = sorted(n for n in tensors if n.endswith(".lut"))[0]
        tensors[first_lut] = np.array([np.nan, 0, 0, 1], dtype=np.float32)
        return Submission(resign(ctx, tensors), HONEST_DELAY_S)


_ALL: tuple[Behaviour, ...] = (
    Honest(), *GRADED, Lazy(), Copycat(), Replay(), Noise(), Scaled(), Stale(), Late(), Malformed(),
    FreeRider(), *ADVERSARIES, Newcomer(), FRONTRUN_NEWCOMER, FRONTRUN_NOISY,
)  # fmt: skip
BUILTIN: dict[str, Behaviour] = {b.name: b for b in _ALL}
