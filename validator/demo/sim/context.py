"""What a simulated peer sees in one window, and the tools it may use (the plugin protocol).

A behaviour is any object with a `name` and `submit(ctx) -> Submission | None`. It gets the window,
its keys, its assigned pages, the current global model, the submissions other peers already
published this window (as a copier would see them) and the encoder, through `PeerContext`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from scoring.data import Dataset, assigned_pages, batches
from scoring.encoder import compress, encode_submission
from scoring.model import LlamaModel
from scoring.signing import Signer
from scoring.train import InnerConfig, train_inner
from scoring.wire import CodecConfig


@dataclass(frozen=True, slots=True)
class Submission:
    """Bytes to publish, `delay_s` seconds after the put window opens (late peers go past it)."""

    data: bytes
    delay_s: float = 5.0


@dataclass(frozen=True, slots=True)
class PeerTools:
    """Shared, immutable settings of the simulated network's peers."""

    dataset: Dataset
    public_seed: str
    pages_per_peer: int
    batch_size: int
    inner: InnerConfig
    codec: CodecConfig
    put_window_s: float


@dataclass(slots=True)
class PeerContext:
    window: int
    uid: int
    signer: Signer
    base: str
    model: LlamaModel  # the current global model; `train` works on a copy
    published: Mapping[str, bytes]  # hotkey -> bytes other peers already published this window
    last_aggregate: Mapping[str, torch.Tensor] | None  # θ(W-1) − θ(W) of the global model, if any
    tools: PeerTools
    memory: dict[str, Any] = field(default_factory=dict)  # the peer's own state across windows

    @property
    def hotkey(self) -> str:
        return self.signer.ss58_address

    def count_window(self) -> int:
        """How many windows this peer was asked to publish for before this one (this one is counted
        now: call it once per `submit`)."""
        done = int(self.memory.get("windows", 0))
        self.memory["windows"] = done + 1
        return done

    def assigned(self, uid: int | None = None) -> list[int]:
        """This peer's assigned pages (or another uid's: what a lazy peer trains on)."""
        t = self.tools
        return assigned_pages(
            self.window, self.uid if uid is None else uid, public_seed=t.public_seed,
            n_pages=t.pages_per_peer, dataset=t.dataset,
        )  # fmt: skip

    def train(
        self, pages: Sequence[int] | None = None, model: LlamaModel | None = None
    ) -> dict[str, torch.Tensor]:
        """H inner AdamW steps on `pages` (default: assigned) from `model` (default: global)."""
        chosen = self.assigned() if pages is None else pages
        data = batches(self.tools.dataset, chosen, self.tools.batch_size)
        return train_inner(self.model if model is None else model, data, self.tools.inner)

    def encode(
        self,
        delta: Mapping[str, torch.Tensor],
        *,
        base: str | None = None,
        feedback: bool = True,
        buffer: str = "error_feedback",
    ) -> bytes:
        """SparseLoCo-compress (with this peer's error feedback unless told not to; `buffer` names
        the memory it is kept in, for a peer that keeps another's) and sign."""
        ef = self.memory.setdefault(buffer, {}) if feedback else None
        compressed = compress(delta, ef, self.tools.codec)
        return encode_submission(
            compressed, window=self.window, uid=self.uid, base=self.base if base is None else base,
            signer=self.signer, cfg=self.tools.codec,
        )  # fmt: skip


class Behaviour(Protocol):
    """The plugin protocol: `gauntlet demo --plugin FILE` loads objects of this shape."""

    @property
    def name(self) -> str: ...

    @property
    def order(self) -> int:  # peers publish in ascending order: copiers go after the peers they copy
        ...

    def submit(self, ctx: PeerContext) -> Submission | None: ...
