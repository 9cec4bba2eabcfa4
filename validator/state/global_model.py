"""The validator's copy of the global model: its base fingerprint, checkpoints and rebuilds.

The model advances by exactly the aggregate of each committed window. After a restart it is rebuilt
from the nearest checkpoint plus the archived submissions aggregated since, so the in-memory model
always equals what the database says happened (DESIGN.md §9).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from scoring.aggregation import aggregate_into
from scoring.decoder import REREAD, decode_submission
from scoring.fingerprint import next_base
from scoring.lazy_update import judge_file
from scoring.model import LlamaModel, param_spec
from scoring.types import SparseParam
from scoring.wire import CodecConfig


@dataclass(slots=True)
class GlobalModel:
    """The model at the start of `window`, whose fingerprint is `base`."""

    model: LlamaModel
    base: str
    window: int

    def advance(
        self,
        updates: Sequence[Mapping[str, SparseParam]],
        digests: Sequence[str],
        reference: Mapping[str, float],
        outer_lr: float,
        weights: Sequence[float] = (),
    ) -> None:
        """Apply one window's aggregate and move the fingerprint along the hash chain (`weights`: each
        update's coefficient, as selected; empty for the equal weights of windows stored before).

        Updates are summed in ascending order of their payload digests, not in the selection's
        rating order: float addition is not associative, and at the demo's sizing the rounding of
        another order moved the final held-out loss by up to 1 % (benchmarks/bench_fidelity.py:
        peers never aggregated still changed it). The model follows the set and its weights only."""
        order = sorted(range(len(updates)), key=lambda i: (digests[i], i))
        aggregate_into(
            dict(self.model.named_parameters()),
            [updates[i] for i in order],
            reference,
            outer_lr,
            [weights[i] for i in order] if weights else None,
        )
        self.base = next_base(self.base, digests)
        self.window += 1


def model_bytes(model: LlamaModel) -> bytes:
    """Checkpoint bytes (safetensors, fp32 on CPU): never pickle."""
    return save_tensors({n: p.detach().to("cpu").contiguous() for n, p in model.named_parameters()})


def load_model_bytes(model: LlamaModel, data: bytes) -> None:
    tensors = load_tensors(data)
    params = dict(model.named_parameters())
    if tensors.keys() != params.keys():
        raise ValueError("checkpoint does not match the model's parameters")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[name])


def decode_archived(data: bytes, model: LlamaModel, codec: CodecConfig) -> Mapping[str, SparseParam]:
    """Re-decode a submission that was accepted when it was judged (its bytes are content-addressed)."""
    result = decode_submission(data, param_spec(model), REREAD, codec)
    if result.update is None:
        raise ValueError(f"archived submission no longer decodes: {result.verdict}")
    return result.update.params


def stored_archived(
    data: bytes, path: Path, model: LlamaModel, codec: CodecConfig
) -> Mapping[str, SparseParam]:
    """`decode_archived`, its parameters left in a file at `path` and decoded when read (bit-identical):
    a window's aggregate is replayed one parameter at a time instead of holding every decoded update."""
    path.write_bytes(data)
    result = judge_file(path, param_spec(model), REREAD, codec)
    if result.update is None:
        raise ValueError(f"archived submission no longer decodes: {result.verdict}")
    return result.update.params


def replay_aggregates(
    state: GlobalModel,
    steps: Iterable[tuple[Sequence[str], Iterable[bytes], Mapping[str, float], Sequence[float]]],
    *,
    outer_lr: float,
    codec: CodecConfig,
    on_step: Callable[[int], None] = lambda _: None,
    scratch: Path | None = None,
) -> None:
    """Advance `state` by stored windows: (payload digests, archived bytes, clip reference, weights).

    The bytes may come lazily: each blob goes to its file before the next is read, so a window costs
    one archived submission in memory, not all of them."""
    for digests, blobs, reference, weights in steps:
        with tempfile.TemporaryDirectory(prefix="gauntlet-replay-", dir=scratch) as folder:
            updates = [
                stored_archived(b, Path(folder) / f"{i}.safetensors", state.model, codec)
                for i, b in enumerate(blobs)
            ]
            state.advance(updates, digests, reference, outer_lr, weights)
        on_step(state.window)
