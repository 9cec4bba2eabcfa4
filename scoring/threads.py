"""A fixed torch thread count for everything that decides a window's results on CPU.

The bits of a CPU reduction depend on how many threads split it: the LossScore forward pass of
the demo model gave other logits at 3, 5 and 6+ threads than at 1, 2 and 4, so a window scored on
one machine did not replay identically on another with more cores (and one scored on evaluation
workers, pinned to 1 thread, not on a host of 6 or more). Scoring, the outer step and replay run
at `SCORING_THREADS` whatever the machine; the count is part of the code, not of a setting, so
every validator computes the same bits. On CUDA the thread count does not enter the kernels.

The count is process-wide and not thread-safe: one round pins it at a time (nothing else does).
On a CPU-only validator every stage of the round runs at one torch thread, and an evaluation
worker's `threads` setting no longer speeds its LossScore passes; many workers are the way to use
more cores.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

SCORING_THREADS = 1


@contextlib.contextmanager
def pinned_threads(n: int = SCORING_THREADS) -> Iterator[None]:
    """torch's intra-op thread count set to `n` for the duration (process-wide), then restored."""
    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
