"""Poisoned submissions: peers whose judging raises (through the round's `Judging` seam: a decoder
or an evaluator that fails for chosen peers), hostile headers that used to crash the decoder, and
all-zero updates. Files are written straight into the peers' folders, as hostile_fixtures does."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from scoring.decoder import Expected
from scoring.encoder import compress, pack_tensors
from scoring.lazy_update import judge_submission
from scoring.loss_score import Batches, LossScoreConfig, PagedLoss, PeerEval, PeerJob, evaluate_peers
from scoring.model import LlamaModel
from scoring.signing import dev_keypair
from scoring.types import DecodeResult, ParamSpec
from scoring.wire import CodecConfig
from tests.hostile_fixtures import HostilePeer, resign
from validator.demo.runner import DemoRunner
from validator.round.checking import Decoder
from validator.round.evaluation import Evaluator
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import object_key, publish


def raising_decoder(bad: Collection[str]) -> Decoder:
    """`judge_submission`, raising for the files of the `bad` hotkeys (a decoder bug they trigger)."""

    def decode(data: bytes | Path, spec: ParamSpec, expect: Expected, codec: CodecConfig) -> DecodeResult:
        if expect.hotkey in bad:
            raise OverflowError("a shape this decoder cannot multiply")
        return judge_submission(data, spec, expect, codec)

    return decode


def _evaluator(
    check: Callable[[Sequence[PeerJob]], None], alter: Callable[[PeerEval], PeerEval]
) -> Evaluator:
    """`evaluate_peers` after `check(jobs)` (which may raise), each result passed through `alter`."""

    def evaluate(
        model: LlamaModel,
        jobs: Sequence[PeerJob],
        heldout: Batches,
        *,
        reference: Mapping[str, float],
        cfg: LossScoreConfig,
        before: PagedLoss | None = None,
    ) -> list[PeerEval]:
        check(jobs)
        return [
            alter(e)
            for e in evaluate_peers(model, jobs, heldout, reference=reference, cfg=cfg, before=before)
        ]

    return evaluate


def raising_evaluator(bad: Collection[int] | None) -> Evaluator:
    """`evaluate_peers`, raising whenever a job of a `bad` uid is in the batch (None: always)."""

    def check(jobs: Sequence[PeerJob]) -> None:
        if bad is None or any(j.uid in bad for j in jobs):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    return _evaluator(check, lambda e: e)


def non_finite_evaluator(
    bad: Collection[int], value: float = math.nan, *, probe_only: bool = False
) -> Evaluator:
    """`evaluate_peers`, with the held-out loss after the update of each `bad` uid set to `value`
    (what an update that overflows the model's activations would read); with `probe_only`, only
    the loss at the larger probe step (an update that holds at β and overflows at 5 β)."""

    def alter(e: PeerEval) -> PeerEval:
        if e.uid not in bad:
            return e
        if probe_only:
            return dataclasses.replace(e, loss_rand_step=value)
        return dataclasses.replace(e, loss_rand_after=value, score=value)

    return _evaluator(lambda jobs: None, alter)


def register(runner: DemoRunner, names: Sequence[str]) -> list[HostilePeer]:
    """One extra peer per name on the runner's chain, each publishing to its own folder."""
    first = max(n.uid for n in runner.chain.neurons()) + 1
    peers = []
    for i, name in enumerate(names):
        path = (runner.cfg.workdir / "stores" / f"poison-{name}").resolve()
        peer = HostilePeer(
            first + i, dev_keypair(f"//poison-{name}"), name, StorageLocation("file", path=str(path))
        )
        runner.chain.register(peer.hotkey, uid=peer.uid)
        runner.chain.commit(peer.hotkey, peer.location.to_commitment())
        peers.append(peer)
    return peers


def upload(runner: DemoRunner, peer: HostilePeer, window: int, data: bytes) -> None:
    """`data` as the peer's file for `window`, uploaded 5 s into the put window."""
    put_start = runner.chain.block_timestamp(runner.round.cfg.window.first_block(window + 1))
    asyncio.run(publish(peer.location, object_key(window, peer.hotkey), data, mtime=put_start + 5.0))


def random_file(
    runner: DemoRunner, peer: HostilePeer, window: int, seed: int, *, zero: bool = False
) -> bytes:
    """A valid signed update of random coordinates; `zero`: every value decodes to 0 (lut all zero)."""
    g = torch.Generator().manual_seed(seed)
    model = runner.state.model.model
    delta = {k: torch.randn(v.shape, generator=g) * 1e-2 for k, v in model.named_parameters()}
    tensors = pack_tensors(compress(delta, None, CodecConfig()))
    if zero:
        tensors = {k: np.zeros(4, np.float32) if k.endswith(".lut") else v for k, v in tensors.items()}
    return resign(peer, window, runner.state.model.base, tensors)


def overflow_header_file() -> bytes:
    """A tiny safetensors file whose one tensor has shape [0, 2**64 − 1] (element count 0, dimensions
    past int64): the safetensors library the decoder used raised on such headers. Whatever check
    refuses it first, it must end as a verdict (`poisoned_header_reason` in bench_faults)."""
    header = {"t.idx": {"dtype": "U8", "shape": [0, 2**64 - 1], "data_offsets": [0, 0]}}
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body
