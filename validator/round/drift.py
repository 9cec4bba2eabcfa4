"""The persistence check of a window (scoring/persistence.py): each compared peer's residual sketch,
its long-lag similarity with its own stored residuals, and the evidence on its rating.

Every valid update after the checks is sketched (copies and recycled work are invalid by then, so
a copier's residual is nobody's evidence). The earlier residuals come from storage: the windows
`lag` … `horizon` before that aggregated something, taken with this window's hash seed (after a
change of the validator's secret the older ones no longer compare and are skipped). A window that
aggregated nothing left the next one at the same base model: residuals taken at one base correlate
for any peer whose recipe differs from the consensus (more training than the weaker peers), which
alone put full honest peers at the alarm in the demo's warm-up (docs/fidelity-log.md, tenth round)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import structlog

from scoring.persistence import (
    F16,
    PersistenceConfig,
    decode,
    encode,
    long_lag_similarity,
    next_evidence,
    over_alarm,
    residuals,
    update_sketch,
)
from scoring.ranking import RatingState
from validator.round.outcomes import PeerWindow
from validator.state.ledger import Ledger

log = structlog.get_logger(__name__)

SketchLoader = Callable[[Collection[str]], Mapping[str, Sequence[F16]]]
# peers whose earlier sketches are read back at a time: up to `horizon − lag + 1` sketches each, so the
# window holds a few MiB of them whatever the number of peers
LOAD_PEERS = 16


def no_sketches(hotkeys: Collection[str]) -> Mapping[str, Sequence[F16]]:
    return {}


@dataclass(frozen=True, slots=True)
class Drift:
    """This window's residuals as stored (float16 bytes, recorded) and each peer's long-lag
    similarity (rated)."""

    residuals: Mapping[str, bytes] = field(default_factory=dict)
    similarity: Mapping[str, float] = field(default_factory=dict)


def sketch_loader(ledger: Ledger, window: int, seed: int, cfg: PersistenceConfig) -> SketchLoader:
    """Reads the peers' residuals of the windows `cfg.lag` … `cfg.horizon` before `window` that
    aggregated something (module docstring)."""

    def load(hotkeys: Collection[str]) -> Mapping[str, Sequence[F16]]:
        if window < cfg.lag:
            return {}
        stored = ledger.sketches(hotkeys, max(window - cfg.horizon, 0), window - cfg.lag)
        out: dict[str, list[F16]] = {}
        for hotkey, rows in stored.items():
            kept = [decode(r.data, cfg.bits) for _, r in rows if r.seed == seed]
            out[hotkey] = [k for k in kept if k is not None]
        return out

    return load


def measure_drift(
    peers: Sequence[PeerWindow],
    cfg: PersistenceConfig,
    seed: int,
    earlier: SketchLoader,
    outside: Collection[str] = (),
) -> Drift:
    """Every valid peer's residual this window and its similarity with its earlier ones; peers
    `outside` (at the alarm before this window) are left out of the consensus."""
    if not cfg.enabled:
        return Drift()
    sketches = {}
    for p in peers:
        if not p.valid or p.update is None:
            continue
        try:
            sketches[p.hotkey] = update_sketch(p.update.params, cfg.bits, seed)
        except Exception as e:  # a peer's own update: it just has no residual this window
            log.warning("residual_sketch_failed", hotkey=p.hotkey, error=repr(e))
    current = residuals(sketches, outside)
    similarity, stored = {}, {}
    keys = sorted(current)
    for first in range(0, len(keys), LOAD_PEERS):
        chunk = keys[first : first + LOAD_PEERS]
        before = earlier(chunk)
        for hotkey in chunk:
            if (s := long_lag_similarity(current[hotkey], before.get(hotkey, ()))) is not None:
                similarity[hotkey] = s
            stored[hotkey] = encode(current.pop(hotkey))  # each peer's sketch as bytes, not twice
            del sketches[hotkey]
        del before
    return Drift(stored, similarity)


def alarmed_peers(state: RatingState, cfg: PersistenceConfig) -> set[str]:
    """Peers whose evidence reached the alarm before this window: outside the residuals' consensus."""
    return {h for h, p in state.peers.items() if over_alarm(p.drift, cfg)}


def with_drift(state: RatingState, drift: Drift, cfg: PersistenceConfig) -> RatingState:
    """The ratings with each peer's persistence evidence after this window (scoring/persistence.py)."""
    peers = {
        h: replace(
            p,
            drift=next_evidence(p.drift, drift.similarity.get(h), cfg),
            drift_similarity=drift.similarity.get(h),
        )
        for h, p in state.peers.items()
    }
    return RatingState(peers, state.window)
