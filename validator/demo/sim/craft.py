"""What simulated peers use to forge submissions: re-signing, reading others' files, training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import safetensors.numpy
import torch

from scoring.data import batches
from scoring.decoder import REREAD, Rejected, decode_submission, submission_digest
from scoring.encoder import signed_file
from scoring.model import param_spec
from scoring.train import train_inner
from scoring.wire import FORMAT_V2, CodecConfig, payload_digest
from validator.demo.sim.context import PeerContext

HONEST_DELAY_S = 5.0
COPY_DELAY_S = 20.0  # copiers must wait for their victim's upload: they are the later uploader
Dense = dict[str, torch.Tensor]


def resign(ctx: PeerContext, tensors: Mapping[str, np.ndarray]) -> bytes:
    """Sign `tensors` as this peer's; they come from `ctx.encode`'s files, which are `gauntlet/2`."""
    try:  # the digest of the decoded update (docs/wire-format.md §7), as the validator computes it
        digest = submission_digest(tensors, param_spec(ctx.model), ctx.tools.codec, FORMAT_V2)
    except Rejected:  # a stream that does not decode: refused before its signature is looked at
        digest = payload_digest(tensors)
    return signed_file(
        tensors, digest, ctx.signer, window=ctx.window, uid=ctx.uid, base=ctx.base, cfg=ctx.tools.codec,
        fmt=FORMAT_V2,
    )  # fmt: skip


def first_loadable(files: list[bytes]) -> dict[str, np.ndarray] | None:
    """The first file that parses (a copier skips the garbage other cheaters upload)."""
    for data in files:
        try:
            # sorted: safetensors hands tensors back in hash order, which varies from run to run,
            # and copiers draw their perturbations tensor by tensor (runs must replay exactly)
            return dict(sorted(safetensors.numpy.load(data).items()))
        except safetensors.SafetensorError:
            continue
    return None


def decoded_others(ctx: PeerContext) -> list[Dense]:
    """The dense updates other peers already published this window (those that decode)."""
    out = [decoded(ctx, data) for hotkey, data in sorted(ctx.published.items()) if hotkey != ctx.hotkey]
    return [d for d in out if d]


def decoded(ctx: PeerContext, data: bytes) -> Dense:
    """One submission's dense update as the validator decodes it ({} when it does not decode)."""
    return decode_dense(data, ctx.model, ctx.tools.codec)


def decode_dense(data: bytes, model: torch.nn.Module, codec: CodecConfig) -> Dense:
    """`decoded` for callers without a peer's context (benchmarks reading what peers published)."""
    result = decode_submission(data, param_spec(model), REREAD, codec)
    return {} if result.update is None else {n: p.dense() for n, p in result.update.params.items()}


def others_pages(ctx: PeerContext) -> list[int]:
    """Pages assigned to a uid nobody holds: what a peer that skips its own assignment trains on."""
    return ctx.assigned(uid=ctx.uid + 10_000)


def train_partial(ctx: PeerContext, steps_fraction: float = 1.0, pages_fraction: float = 1.0) -> Dense:
    """Honest training with a fraction of the inner steps, or on a fraction of the assigned pages."""
    pages: Sequence[int] = ctx.assigned()
    pages = pages[: max(1, round(len(pages) * pages_fraction))]
    inner = replace(ctx.tools.inner, steps=max(1, round(ctx.tools.inner.steps * steps_fraction)))
    return train_inner(ctx.model, batches(ctx.tools.dataset, pages, ctx.tools.batch_size), inner)


def direction(ctx: PeerContext, seed: int) -> Dense:
    """A fixed random unit direction over the whole model (the same for every peer using `seed`)."""
    return model_direction(ctx.model, seed)


def model_direction(model: torch.nn.Module, seed: int) -> Dense:
    """`direction` for callers without a peer's context (a benchmark measuring it in updates)."""
    g = torch.Generator().manual_seed(seed)
    d = {n: torch.randn(p.shape, generator=g) for n, p in model.named_parameters()}
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in d.values()]))
    return {n: t / norm for n, t in d.items()}


def total_norm(delta: Mapping[str, torch.Tensor]) -> float:
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.float()) for t in delta.values()]))
    )


def with_noise(delta: Mapping[str, torch.Tensor], level: float, seed: int) -> Dense:
    """`delta` plus Gaussian noise at `level` × each tensor's RMS, before compression (none at 0)."""
    if level == 0.0:
        return dict(delta)
    g = torch.Generator().manual_seed(seed)
    return {
        n: t + torch.randn(t.shape, generator=g) * level * float(t.pow(2).mean().sqrt())
        for n, t in delta.items()
    }
