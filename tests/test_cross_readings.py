"""Which flagged pairs' updates are read on each other's pages (validator/round/cross.py)."""

from __future__ import annotations

from dataclasses import replace

from scoring.copy_config import CopyTier
from scoring.copy_findings import CopyFinding
from tests.test_selection import sized
from validator.round.cross import readings_limit, to_read
from validator.round.outcomes import PeerWindow


def _peer(hotkey: str, uid: int, digest: str) -> PeerWindow:
    p = sized(hotkey, uid, 1.0)
    assert p.update is not None
    return replace(p, update=replace(p.update, digest=digest, decoded=None))


def _finding(offender: str, other: str, clear: bool = False) -> CopyFinding:
    return CopyFinding(offender, other, 0.9, CopyTier.BAN, "copy", clear=clear)


def test_pairs_are_read_whole_the_ones_the_own_tests_would_act_on_first() -> None:
    """A review: a crowd of cheap identities flagged among themselves at low overlap came first and
    pushed a copier's pair out of the window's readings (which can only veto what the own tests
    would do); an odd limit read one direction of a pair. One payload needs no reading at all."""
    evaluated = {h: _peer(h, u, f"d{u}") for u, h in enumerate(["victim", "copier", "s1", "s2", "twin"])}
    evaluated["twin"] = _peer("twin", 9, "d0")  # the victim's very bytes
    findings = [
        _finding("s2", "s1"),
        _finding("copier", "victim"),
        _finding("twin", "victim"),
        _finding("x", "s1"),
    ]
    page_t = {"victim": 2.3, "copier": 6.0, "s1": 0.1, "s2": 0.3, "twin": 0.2}
    assert to_read(findings, evaluated, page_t) == [("copier", "victim"), ("s2", "s1")]
    clear = [*findings, _finding("s1", "victim", clear=True)]
    assert to_read(clear, evaluated, page_t)[0] == ("s1", "victim")  # a clear finding can convict
    assert readings_limit(0.5, 7) // 2 == 1  # 3 readings: one whole pair
