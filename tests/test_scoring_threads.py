"""Scoring's bits do not depend on the machine's core count (scoring/threads.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from scoring.loss_score import deterministic
from scoring.model import ModelConfig, build_model
from scoring.threads import SCORING_THREADS, pinned_threads

CPU = torch.device("cpu")


@pytest.fixture
def ambient_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _logits(threads: int) -> torch.Tensor:
    """The demo model's forward pass under `deterministic`, the process set to `threads` threads."""
    torch.set_num_threads(threads)
    model = build_model(ModelConfig.tiny(256), seed=0, device=CPU)
    batch = torch.randint(0, 256, (8, 64), generator=torch.Generator().manual_seed(1))
    with deterministic(CPU), torch.inference_mode():
        return model(batch)


@pytest.mark.usefixtures("ambient_threads")
def test_losses_are_the_same_bits_on_a_machine_with_more_cores() -> None:
    """At 3, 5 and 6+ threads the forward pass gave other logits than at 1, 2 and 4: a window
    scored on one machine did not replay identically on another (16,827 of its logits at 6)."""
    reference = _logits(1)
    for threads in (3, 6):
        assert torch.equal(_logits(threads), reference), threads
    assert torch.get_num_threads() == 6  # restored after the context


@pytest.mark.usefixtures("ambient_threads")
def test_pinned_threads_restores_the_count_even_when_the_work_raises() -> None:
    torch.set_num_threads(3)
    with deterministic(CPU):
        assert torch.get_num_threads() == SCORING_THREADS
    with pytest.raises(RuntimeError), pinned_threads(1):
        assert torch.get_num_threads() == 1
        raise RuntimeError("scoring failed")
    assert torch.get_num_threads() == 3
