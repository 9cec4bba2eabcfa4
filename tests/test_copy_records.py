"""What a window records of its flagged copy pairs (validator/round/recording.py)."""

from __future__ import annotations

import itertools

from scoring.copy_config import CopyTier
from scoring.types import Reason
from scoring.uniqueness import CopyFinding
from validator.round.recording import copy_pair_records


def _finding(a: str, b: str, similarity: float, *, clear: bool = False) -> CopyFinding:
    return CopyFinding(b, a, 0.5, CopyTier.HALVE, Reason.COPY, similarity, 0.1, clear)


def test_a_crowd_of_copies_records_a_few_pairs_per_peer() -> None:
    """Every flagged pair was recorded: one group of jittered copies flags all n(n-1)/2 pairs, and
    256 identities in 2 groups wrote 15,252 rows (7 MB) a window, nobody penalised."""
    crowd = [f"5Sybil{i:03d}" for i in range(40)]
    findings = [
        _finding(a, b, 0.2 + 0.001 * (i % 7)) for i, (a, b) in enumerate(itertools.combinations(crowd, 2))
    ]
    victim, copier = "5Honest", "5Copier"
    findings.append(_finding(victim, copier, 0.15, clear=True))  # weaker, but its order is clear
    records = copy_pair_records(findings)
    assert len(findings) == 781 and len(records) <= 3 * 42
    named = [h for r in records for h in (r.hotkey_a, r.hotkey_b)]
    assert all(named.count(h) >= 1 for h in crowd)  # every member keeps its strongest pairs
    [decided] = [r for r in records if r.clear]
    assert (decided.offender, {decided.hotkey_a, decided.hotkey_b}) == (copier, {victim, copier})


def test_a_few_flagged_pairs_are_all_recorded() -> None:
    findings = [_finding("5A", "5B", 0.3), _finding("5A", "5C", 0.2), _finding("5B", "5C", 0.25)]
    assert [(r.hotkey_a, r.hotkey_b) for r in copy_pair_records(findings)] == [
        ("5A", "5B"),
        ("5A", "5C"),
        ("5B", "5C"),
    ]


def test_what_each_offender_is_rejected_for_is_always_recorded() -> None:
    """Its decisive finding (the first of its worst tier) could be dropped once both sides were full
    of stronger pairs: the record then showed other pairs than the one the peer was banned for."""

    def clear(offender: str, other: str, similarity: float) -> CopyFinding:
        return CopyFinding(offender, other, 0.7, CopyTier.BAN, Reason.COPY, similarity, 0.1, True)

    findings = [clear("5X", "5A", 0.5), clear("5X", "5B", 0.9), clear("5C", "5A", 0.95)]
    records = copy_pair_records(findings, per_peer=1)
    assert ("5A", "5X") in {(r.hotkey_a, r.hotkey_b) for r in records}


def test_every_pair_read_on_each_others_pages_is_recorded() -> None:
    """Replay reads exactly the readings stored with the window's pairs (validator/round/cross.py):
    a read pair dropped past `per_peer` lost its readings, and replay then decided without them
    what the live round had decided with them."""
    findings = [_finding("5A", "5B", 0.9), _finding("5C", "5D", 0.8), _finding("5A", "5D", 0.1)]
    shown = {(r.hotkey_a, r.hotkey_b) for r in copy_pair_records(findings, per_peer=1)}
    assert ("5A", "5D") not in shown
    read = {("5A", "5D"): 1.5, ("5D", "5A"): -0.2}  # the weakest pair's updates were read
    records = {(r.hotkey_a, r.hotkey_b): r for r in copy_pair_records(findings, read, per_peer=1)}
    assert (records[("5A", "5D")].authorship_a, records[("5A", "5D")].authorship_b) == (1.5, -0.2)
