"""The recycled-work check of a window (scoring/recycling.py): the updates earlier windows
aggregated, read back from the archive, and the rejection of this window's updates that repeat one
of them.

Memory and disk are bounded at the run's size: each earlier submission is written to one file of a
temporary folder, decoded from there one parameter at a time (`judge_file`) into its rows in the
window's sampled chunks, and deleted before the next is read; the check keeps those rows only. Its
cost is reading `recycled_windows` windows' aggregated submissions back from the archive each
window (at most `recycled_windows` × `gather_peers` files)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import structlog

from scoring.decoder import REREAD
from scoring.lazy_update import judge_file
from scoring.recycling import Earlier, EarlierRows, find_recycled
from scoring.similarity import Block, sampled
from scoring.types import ParamSpec, Reason
from validator.round.check_config import CheckConfig
from validator.round.outcomes import PeerWindow
from validator.state.ledger import Ledger

log = structlog.get_logger(__name__)


def no_earlier(blocks: Sequence[Block]) -> Sequence[Earlier]:
    return ()


def earlier_loader(ledger: Ledger, window: int, spec: ParamSpec, cfg: CheckConfig) -> EarlierRows:
    """Reads the submissions aggregated in the `cfg.recycled_windows` windows before `window` from
    the archive, each reduced to its rows in the blocks asked. Only aggregated ones: they are what
    is worth recycling (the last aggregate is their mean), and a framer must get its bait aggregated
    first (an update trained a window early on the pages a victim will be assigned next, which are
    public, would otherwise resemble the victim's next update and could get it rejected). The live
    round and replay both use it, so replay compares with the same updates; one the retention has
    pruned is skipped (there is nothing left to compare with)."""

    def rows(blocks: Sequence[Block]) -> list[Earlier]:
        if cfg.recycled_windows == 0:
            return []
        out, missing = [], 0
        with tempfile.TemporaryDirectory(prefix="gauntlet-recycled-", dir=ledger.scratch) as folder:
            path = Path(folder) / "earlier.safetensors"
            for w, hotkey, digest in ledger.aggregated_archived(window, cfg.recycled_windows):
                try:
                    path.write_bytes(ledger.archive.get(digest))
                except KeyError:
                    missing += 1
                    continue
                # accepted when it was judged: its signature and window were checked then
                result = judge_file(path, spec, REREAD, cfg.codec)
                if result.update is not None:
                    idx, val = sampled([result.update.params], blocks)
                    out.append(Earlier(hotkey, w, idx[0], val[0]))
                del result
                path.unlink()
        if missing:
            log.warning("recycled_check_pruned", window=window, missing=missing)
        return out

    return rows


def reject_recycled(
    peers: Sequence[PeerWindow], earlier: EarlierRows, cfg: CheckConfig, *, seed: int
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
