"""The recycled-work check of a window (scoring/recycling.py): earlier windows' valid updates, read
back from the archive, and the rejection of this window's updates that repeat one of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import structlog

from scoring.decoder import Expected, decode_submission
from scoring.recycling import Earlier, find_recycled
from scoring.types import ParamSpec, Reason
from validator.round.checking import CheckConfig
from validator.round.outcomes import PeerWindow
from validator.state.ledger import Ledger

log = structlog.get_logger(__name__)

EarlierLoader = Callable[[], Sequence[Earlier]]


def no_earlier() -> Sequence[Earlier]:
    return ()


def earlier_loader(ledger: Ledger, window: int, spec: ParamSpec, cfg: CheckConfig) -> EarlierLoader:
    """Reads the valid submissions of the `cfg.recycled_windows` windows before `window` from the
    archive when called. The live round and replay both use it, so replay compares with the same
    updates; one the retention has pruned is skipped (there is nothing left to compare with)."""

    def load() -> list[Earlier]:
        if cfg.recycled_windows == 0:
            return []
        out, missing = [], 0
        for w, hotkey, digest in ledger.valid_archived(window, cfg.recycled_windows):
            try:
                data = ledger.archive.get(digest)
            except KeyError:
                missing += 1
                continue
            # accepted when it was judged: its signature and window were checked then
            result = decode_submission(data, spec, Expected(verify_signature=False), cfg.codec)
            if result.update is not None:
                out.append(Earlier(hotkey, w, dict(result.update.params)))
        if missing:
            log.warning("recycled_check_pruned", window=window, missing=missing)
        return out

    return load


def reject_recycled(
    peers: Sequence[PeerWindow], earlier: Sequence[Earlier], cfg: CheckConfig, *, seed: int
) -> list[PeerWindow]:
    """Each valid peer whose update repeats an earlier window's becomes invalid (`recycled`), with
    the copy tier its finding reaches (the rating penalises it as a copier)."""
    current = [(p.hotkey, p.update.params) for p in peers if p.valid and p.update is not None]
    found = find_recycled(current, earlier, cfg.uniqueness, seed=seed)
    out = []
    for p in peers:
        f = found.get(p.hotkey)
        out.append(p if f is None else replace(p.reject(Reason.RECYCLED, f.detail), copy_tier=f.tier))
    return out
