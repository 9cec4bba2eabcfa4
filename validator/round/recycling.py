"""The recycled-work check of a window (scoring/recycling.py): the updates earlier windows
aggregated, read back from the archive, and the rejection of this window's updates that repeat one of them.

Memory is bounded as for the window's own submissions (issue 14): each earlier submission is
written to a file of a temporary folder and its update decoded from there one parameter at a time
(`judge_file`), so the check holds the sampled chunks of every update, never whole updates. Its
cost is reading `recycled_windows` windows' aggregated submissions back from the archive each window
(the demo: a few milliseconds per submission)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import structlog

from scoring.decoder import Expected
from scoring.lazy_update import judge_file
from scoring.recycling import Earlier, find_recycled
from scoring.types import ParamSpec, Reason
from validator.round.checking import CheckConfig
from validator.round.outcomes import PeerWindow
from validator.state.ledger import Ledger

log = structlog.get_logger(__name__)

EarlierLoader = Callable[[Path], Sequence[Earlier]]  # spools into the folder it is given


def no_earlier(folder: Path) -> Sequence[Earlier]:
    return ()


def earlier_loader(ledger: Ledger, window: int, spec: ParamSpec, cfg: CheckConfig) -> EarlierLoader:
    """Reads the submissions aggregated in the `cfg.recycled_windows` windows before `window` from the
    archive into the folder it is called with. Only aggregated ones: they are what is worth
    recycling (the last aggregate is their mean), and a framer must get its bait aggregated first
    (an update trained a window early on the pages a victim will be assigned next, which are public,
    would otherwise resemble the victim's next update and could get it rejected). The live round and
    replay both use it, so replay compares with the same updates; one the retention has pruned is
    skipped (there is nothing left to compare with)."""

    def load(folder: Path) -> list[Earlier]:
        if cfg.recycled_windows == 0:
            return []
        out, missing = [], 0
        for i, (w, hotkey, digest) in enumerate(ledger.aggregated_archived(window, cfg.recycled_windows)):
            try:
                data = ledger.archive.get(digest)
            except KeyError:
                missing += 1
                continue
            path = folder / f"{i}.safetensors"
            path.write_bytes(data)
            del data
            # accepted when it was judged: its signature and window were checked then
            result = judge_file(path, spec, Expected(verify_signature=False), cfg.codec)
            if result.update is not None:
                out.append(Earlier(hotkey, w, result.update.params))
        if missing:
            log.warning("recycled_check_pruned", window=window, missing=missing)
        return out

    return load


def reject_recycled(
    peers: Sequence[PeerWindow], earlier: EarlierLoader, cfg: CheckConfig, *, seed: int
) -> list[PeerWindow]:
    """Each valid peer whose update repeats an earlier window's becomes invalid (`recycled`), with
    the copy tier its finding reaches (the rating penalises it as a copier)."""
    current = [(p.hotkey, p.update.params) for p in peers if p.valid and p.update is not None]
    if not current:
        return list(peers)
    with tempfile.TemporaryDirectory(prefix="gauntlet-recycled-") as folder:
        found = find_recycled(current, earlier(Path(folder)), cfg.uniqueness, seed=seed)
    out = []
    for p in peers:
        f = found.get(p.hotkey)
        out.append(p if f is None else replace(p.reject(Reason.RECYCLED, f.detail), copy_tier=f.tier))
    return out
