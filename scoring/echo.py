"""Echoes of the window's consensus (issue 12): an update that is the mean of the others'.

A peer that proved its training and then stops can download the window's other submissions and
send their average, re-compressed and signed as its own. The copy check compares peers beyond the
window's consensus (scoring/similarity.py), and an echo of the consensus has nothing beyond it, so
no pair is flagged; its held-out gain is the consensus's, better than any one peer's. Measured at
the demo's sizing (4 honest peers, windows 4-6): it was aggregated, and paid 13 % of the weights.

What gives it away is how little of it is its own. Each update's *own share* is 1 − c², c the
cosine of its sketch with the leave-one-out consensus of the others (weighted as the residual
similarity weighs them, so junk does not blur it). Honest peers trained on their own data keep
a share of their own at any stage of training; an echo keeps only its re-compression error.
Measured (seed 0, windows 1-6): at 20 inner steps honest shares 0.77-0.94 and the echo's 0.30; at
1 inner step honest 0.30-0.56 and the echo's 0.11-0.14. Read relative to the window's median share
among proven peers (identities that never proved training cannot move it), honest peers stayed at
0.9 of it or above, the echo at 0.24-0.38: under `ratio` (0.5) an update is an echo.

Copies of one update count once. Re-sending a proven peer's bytes under two identities whose
upload order is unclear penalises nobody (scoring/uniqueness.py), but counted apart those copies
were most of the victim's "consensus of the others": its own share fell to 0.15 against a proven
median of 0.97 and it was rejected as an echo of its own work (an audit's reproducer). The members
of each group the copy check ties (duplicates, near-copies, one update jittered) therefore share
one voice, their mean, in every consensus, and leave one another out of their own.

What this closes is the free copy of everybody's work. Adding noise of its own lifts an echo's
share above the bar at little cost to its gain (top-k re-compression keeps the mean's large
coordinates and spreads dense noise thin): such an echo is aggregated until its proof of training
lapses, like any peer that stopped training (`echo_noisy` in docs/fidelity-log.md).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scoring.copy_config import UniquenessConfig
from scoring.similarity import count_sketch, sample_blocks, sampled
from scoring.twins import clusters
from scoring.types import SparseParam

F64 = npt.NDArray[np.float64]
MIN_PEERS = 4  # an echo needs at least three others to average, and the consensus three to be one
MIN_REFERENCE = 3  # proven peers whose median share is the window's reference


@dataclass(frozen=True, slots=True)
class Echo:
    """A peer's update that is mostly the window's consensus: its own share and the reference."""

    share: float
    reference: float

    @property
    def detail(self) -> str:
        return (
            f"echo of the window's consensus: own share {self.share:.3f}, proven median {self.reference:.3f}"
        )


def own_shares(
    updates: Sequence[Mapping[str, SparseParam]],
    cfg: UniquenessConfig,
    rng: np.random.Generator,
    groups: Sequence[int] | None = None,
) -> F64:
    """Each update's share beyond the leave-one-out consensus of the others (module docstring),
    from count sketches of one seeded sample of chunks; rounded, so replay compares it exactly.
    `groups`: a group number per update (default: each its own); a group speaks with one voice.
    numpy's own sums, never BLAS, whose last bits follow the thread count."""
    blocks = sample_blocks(updates[0], cfg, rng)
    if not blocks:
        return np.ones(len(updates), dtype=np.float64)
    idx, val = sampled(updates, blocks)
    unit = count_sketch(idx, val, cfg.sketch_bits, rng).numpy()
    del idx, val
    unit /= _norms(unit)
    group = np.arange(len(updates)) if groups is None else np.asarray(groups, dtype=np.int64)
    sizes = np.bincount(group)
    voice = np.zeros((sizes.size, unit.shape[1]), np.float64)
    np.add.at(voice, group, unit)  # in input order: reproducible
    voice /= np.maximum(sizes, 1)[:, None]
    mean = voice.sum(0)
    mean /= _norms(mean[None, :])[0]
    weight = np.maximum(np.sum(voice * mean, axis=1), 0.0)
    own = weight[:, None] * voice
    others = own.sum(0) - own[group]  # the consensus each update leaves out, its own group with it
    del own
    others /= _norms(others)
    cosine = np.maximum(np.sum(unit * others, axis=1), 0.0)  # against the consensus counts as all its own
    share: F64 = 1.0 - cosine * cosine
    return np.round(share, 9)


def _norms(rows: F64) -> F64:
    out: F64 = np.maximum(np.sqrt(np.sum(rows * rows, axis=1, keepdims=True)), 1e-30)
    return out


def groups_of(keys: Sequence[str], ties: Iterable[tuple[str, str]]) -> list[int]:
    """A group number per key: the keys `ties` join, directly or through others, are one group
    (scoring/twins.py `clusters`); numbered in the order of their first key in `keys`."""
    present = set(keys)
    cluster = {
        k: i for i, group in enumerate(clusters([p for p in ties if set(p) <= present])) for k in group
    }
    number: dict[tuple[int, str], int] = {}
    return [number.setdefault((cluster[k], "") if k in cluster else (-1, k), len(number)) for k in keys]


def find_echoes(
    updates: Mapping[str, Mapping[str, SparseParam]],
    proven: Collection[str],
    cfg: UniquenessConfig,
    ratio: float,
    seed: int,
    ties: Iterable[tuple[str, str]] = (),
) -> dict[str, Echo]:
    """The peers (keys of `updates`, valid this window) whose own share is under `ratio` × the
    median share of the `proven` among them; none with fewer than `MIN_PEERS` updates or
    `MIN_REFERENCE` proven ones (nothing to call a consensus or a typical share). `ties`: pairs the
    copy check tied (module docstring)."""
    keys = sorted(updates)
    if ratio <= 0.0 or len(keys) < MIN_PEERS:
        return {}
    groups = groups_of(keys, ties)
    shares = own_shares([updates[k] for k in keys], cfg, np.random.default_rng(seed), groups)
    reference = [float(s) for k, s in zip(keys, shares, strict=True) if k in proven]
    if len(reference) < MIN_REFERENCE:
        return {}
    typical = float(np.median(reference))
    return {
        k: Echo(float(s), round(typical, 9)) for k, s in zip(keys, shares, strict=True) if s < ratio * typical
    }
