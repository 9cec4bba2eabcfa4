"""The built-in peer behaviours of the demo: one honest, nine ways to cheat or fail."""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import safetensors.numpy
import torch

from scoring.model import LlamaModel
from scoring.signing import sign_hex
from scoring.wire import FORMAT, payload_digest, signed_message
from validator.sim.context import Behaviour, PeerContext, Submission

HONEST_DELAY_S = 5.0
COPY_DELAY_S = 20.0  # copiers must wait for their victim's upload: they are the later uploader


@dataclass(frozen=True)
class Honest:
    name: str = "honest"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        return Submission(ctx.encode(ctx.train()), HONEST_DELAY_S)


@dataclass(frozen=True)
class Lazy:
    """Trains for real, but on pages assigned to somebody else (cheaper data, no proof of work)."""

    name: str = "lazy"
    order: int = 0

    def submit(self, ctx: PeerContext) -> Submission | None:
        return Submission(ctx.encode(ctx.train(ctx.assigned(uid=ctx.uid + 10_000))), HONEST_DELAY_S)


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


def _resign(ctx: PeerContext, tensors: Mapping[str, np.ndarray]) -> bytes:
    digest = payload_digest(tensors)
    meta = {
        "format": FORMAT, "window": str(ctx.window), "uid": str(ctx.uid), "hotkey": ctx.hotkey,
        "base": ctx.base, "chunk": str(ctx.tools.codec.chunk), "topk": str(ctx.tools.codec.topk),
        "signature": sign_hex(ctx.signer, signed_message(ctx.window, ctx.uid, ctx.hotkey, ctx.base, digest)),
    }  # fmt: skip
    return safetensors.numpy.save(dict(tensors), metadata=meta)


def _first_loadable(files: list[bytes]) -> dict[str, np.ndarray] | None:
    """The first file that parses (a copier skips the garbage other cheaters upload)."""
    for data in files:
        try:
            return dict(safetensors.numpy.load(data))
        except safetensors.SafetensorError:
            continue
    return None


@dataclass(frozen=True)
class Copycat:
    """Takes another peer's fresh submission, perturbs some codes so the digest differs, re-signs it."""

    name: str = "copycat"
    order: int = 1
    perturb: float = 0.1

    def submit(self, ctx: PeerContext) -> Submission | None:
        # the first peer to publish (peers publish by uid): a copier wants the freshest real work
        tensors = _first_loadable([data for h, data in ctx.published.items() if h != ctx.hotkey])
        if tensors is None:
            return None
        rng = np.random.default_rng(ctx.window)
        for name in [n for n in tensors if n.endswith(".val")]:
            codes = tensors[name].copy()
            flip = rng.random(codes.shape) < self.perturb
            codes[flip] ^= 0b01010101  # toggles magnitude bits, keeps every sign
            tensors[name] = codes
        return Submission(_resign(ctx, tensors), COPY_DELAY_S)


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
        return Submission(_resign(ctx, tensors), HONEST_DELAY_S)


_ALL: tuple[Behaviour, ...] = (
    Honest(), Lazy(), Copycat(), Replay(), Noise(), Scaled(), Stale(), Late(), Malformed(), FreeRider(),
)  # fmt: skip
BUILTIN: dict[str, Behaviour] = {b.name: b for b in _ALL}
