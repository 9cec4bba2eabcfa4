"""The peer side's inner loop: H AdamW steps from the global model, returning the pseudo-gradient.

Used by miners, by the demo's simulated peers and by LossScore tests. Convention (DESIGN.md §1):
Δ = θ_start − θ_end, so the validator's `θ − β·Δ` moves toward the trained model.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from scoring.model import LlamaModel, autocast


@dataclass(frozen=True, slots=True)
class InnerConfig:
    """SparseLoCo's inner optimizer: AdamW(0.9, 0.95), weight decay 0.1, gradient clip 1.0."""

    steps: int = 30
    lr: float = 2e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        if self.steps <= 0 or self.lr <= 0 or self.grad_clip <= 0 or self.weight_decay < 0:
            raise ValueError(f"invalid inner config {self}")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError("betas must be in [0, 1)")


def next_token_loss(model: LlamaModel, batch: torch.Tensor) -> torch.Tensor:
    """Token-mean cross-entropy of a (B, T+1) page batch: inputs [:, :-1], targets [:, 1:]."""
    with autocast(batch.device):
        logits = model(batch[:, :-1])  # (B, T, V)
    return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())


def train_inner(
    model: LlamaModel, batches: Sequence[torch.Tensor], cfg: InnerConfig = InnerConfig()
) -> dict[str, torch.Tensor]:
    """Train a copy of `model` for cfg.steps steps, cycling through `batches`; the caller keeps its model.

    Returns Δ = θ_start − θ_end per parameter, float32, keyed by `named_parameters()` names.
    """
    if not batches:
        raise ValueError("train_inner needs at least one batch")
    work = copy.deepcopy(model)
    work.train()
    params = [p for p in work.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    device = next(work.parameters()).device
    for step in range(cfg.steps):
        batch = batches[step % len(batches)].to(device)
        loss = next_token_loss(work, batch)
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
    end = dict(work.named_parameters())
    with torch.no_grad():
        return {name: (p.float() - end[name].float()).cpu() for name, p in model.named_parameters()}
