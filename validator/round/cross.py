"""Each flagged pair's updates read on the other sender's pages: the readings behind authorship
(scoring/authorship.py), measured after the window's evaluation and before the conviction. Room
left after them goes to the window's closest pairs no finding names (scoring/uniqueness.py
`_closest`): a copy that dodged the tiers is read there (scoring/copy_findings.py `held_findings`).

For a pair (x, p) whose payloads differ, p's update is evaluated as if x had sent it (x's assigned
pages, the window's held-out pages) and its page test t is the reading (x, p); both directions of a
pair are read. A pair that sent one payload needs none: the reading is each side's own test. The
readings cost one evaluation each, so a window reads at most `cross_share` × its evaluated peers
and no more than the time left affords (`ReadingPlan`; `to_read` says which pairs first). The live
round keeps part of its evaluation budget for them (`kept_for_readings`), two a flagged pair with a
proven sender only: a pair of two unproven senders is read from what the evaluation leaves. An
evaluation that fails leaves its reading out (logged): the rules then read the sender's own test,
as before the readings existed. Replay reads exactly the readings the window stored (the plan's
`recorded`), as it evaluates exactly the peers the window evaluated: a reading a worker lost in
the live round stays lost, the decisions it left to the own tests are re-derived as they were
made, and every stored reading is compared with its re-reading.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import structlog

from scoring.authorship import Pair
from scoring.copy_findings import CopyFinding, Watched
from scoring.page_test import own_t
from scoring.twins import OWNERSHIP_MARGIN
from validator.round.evaluation import EvalSetup, HeldOut, evaluate_chosen
from validator.round.outcomes import PeerWindow

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ReadingPlan:
    """How many of the window's readings it takes, and which."""

    share: float  # at most this × the evaluated peers (EvalConfig.cross_share)
    proven: Collection[str] = frozenset()  # proven before the window: pairs with one are read first
    cap: int | None = None  # the evaluations the time left affords (None: no cap)
    recorded: Collection[Pair] | None = None  # replay: exactly the readings the window stored


def wanted_readings(
    peers: Sequence[PeerWindow],
    findings: Sequence[CopyFinding],
    page_t: Mapping[str, float],
    plan: ReadingPlan,
    watched: Sequence[Watched] = (),
) -> list[Pair]:
    """The readings (x, p) the window takes, both directions of each pair `to_read` puts within the
    plan's limit, then of the `watched` pairs (the closest no finding names, scoring/uniqueness.py)
    while room is left; `page_t`: the window's page tests (validator/round/outcomes.py
    `page_tests`). Given `recorded` (replay: the readings the window stored), only those of them."""
    evaluated = _evaluated(peers)
    limit = readings_limit(plan.share, len(evaluated))
    limit = limit if plan.cap is None else min(limit, plan.cap)
    flagged = to_read(findings, evaluated, page_t, plan.proven)
    close = [(w.a, w.b) for w in watched if _readable(evaluated, w.a, w.b)]
    pairs = [*flagged, *close][: limit // 2]  # a watched pair is one no finding names
    wanted = [d for a, b in pairs for d in ((a, b), (b, a))]
    return wanted if plan.recorded is None else [d for d in wanted if d in plan.recorded]


def kept_for_readings(
    whole: int, share: float, findings: Sequence[CopyFinding], proven: Collection[str]
) -> int:
    """What an evaluation budget of `whole` keeps for the window's readings: two a flagged pair with a
    proven sender, within `readings_limit`. A pair of two unproven senders is no claim on it: the
    rules the readings can veto act on peers that may be aggregated, and a crowd of cheap identities
    flagged among themselves (two pairs at a budget of 8) took half the budget from the evaluation,
    whose proven tier then had room for three of four honest peers."""
    pairs = {frozenset((f.offender, f.other)) for f in findings if f.offender in proven or f.other in proven}
    return min(readings_limit(share, whole), 2 * len(pairs))


def cross_readings(
    setup: EvalSetup,
    peers: Sequence[PeerWindow],
    wanted: Sequence[Pair],
    held: HeldOut,
    reference: Mapping[str, float],
) -> dict[Pair, float]:
    """The readings `wanted` (module docstring): p's update evaluated on x's pages, its page test t."""
    evaluated = _evaluated(peers)
    out: dict[Pair, float] = {}
    for batch in _rounds(wanted):
        # p's update sent as x: x's uid draws x's pages, p's bytes (or archive key) the update
        posed = [_posed(evaluated[x], evaluated[p]) for x, p in batch]
        results, _, _ = evaluate_chosen(setup, posed, held, reference)
        by_uid = {r.uid: r for r in results}
        for x, p in batch:
            result = by_uid.get(evaluated[x].uid)
            if result is not None and (t := own_t(result.pages)) is not None:
                out[(x, p)] = t
            else:  # stored as not read: replay leaves it out as the live round did
                log.warning("cross_reading_lost", window=setup.window, reader=x, sender=p)
    return out


def _evaluated(peers: Sequence[PeerWindow]) -> dict[str, PeerWindow]:
    return {p.hotkey: p for p in peers if p.evaluation is not None and p.update is not None}


def readings_limit(share: float, evaluated: int) -> int:
    """How many readings a window with `evaluated` peers takes at most (two a pair)."""
    return int(share * evaluated)


def to_read(
    findings: Sequence[CopyFinding],
    evaluated: Mapping[str, PeerWindow],
    page_t: Mapping[str, float],
    proven: Collection[str] = frozenset(),
) -> list[Pair]:
    """The findings whose senders were evaluated and sent different payloads, each pair once, in the
    order they are read: first the pairs where the own tests would leave a `proven` sender out
    (its pages `OWNERSHIP_MARGIN` under its partner's, or both proven: the lower is not kept), then
    clear findings (they can convict), then pairs with a proven sender, then the rest; within each,
    by how far the senders' own page tests differ, the widest first. A reading can only veto a rule
    the own tests would apply (scoring/authorship.py), so the pairs where those would apply come
    first: a crowd of cheap identities flagged among themselves cannot push a copier's pair out of
    the window's readings, nor, by a wide spread of two noise tests, a proven peer's; nor can one
    cheap copier of a proven peer, whose clear finding took the only pair a six-peer window reads
    while a proven copier's raised own test disowned its victim (a red-team run)."""

    def spread(f: CopyFinding) -> float:
        return abs(page_t.get(f.offender, 0.0) - page_t.get(f.other, 0.0))

    def unproven(f: CopyFinding) -> bool:
        return f.offender not in proven and f.other not in proven

    def against_proven(f: CopyFinding) -> bool:
        lower = min((f.offender, f.other), key=lambda k: (page_t.get(k, 0.0), k))
        both = f.offender in proven and f.other in proven
        return not f.clear and lower in proven and (both or spread(f) >= OWNERSHIP_MARGIN)

    def stake(f: CopyFinding) -> tuple[bool, bool, bool, float, str, str]:
        return not against_proven(f), not f.clear, unproven(f), -spread(f), f.offender, f.other

    order = sorted(findings, key=stake)
    out: list[Pair] = []
    for f in order:
        if not _readable(evaluated, f.offender, f.other):
            continue
        if (f.offender, f.other) not in out and (f.other, f.offender) not in out:
            out.append((f.offender, f.other))
    return out


def _readable(evaluated: Mapping[str, PeerWindow], x: str, p: str) -> bool:
    """Both senders evaluated, with different payloads (one payload needs no reading)."""
    a, b = evaluated.get(x), evaluated.get(p)
    return not (a is None or b is None or a.update is None or b.update is None or _one_payload(a, b))


def _one_payload(a: PeerWindow, b: PeerWindow) -> bool:
    assert a.update is not None and b.update is not None
    same_bytes = a.update.digest == b.update.digest
    same_values = a.update.decoded is not None and a.update.decoded == b.update.decoded
    return same_bytes or same_values


def _posed(x: PeerWindow, p: PeerWindow) -> PeerWindow:
    return replace(x, update=p.update, content_digest=p.content_digest)


def _rounds(pairs: Sequence[Pair]) -> list[list[Pair]]:
    """`pairs` split into evaluation calls in which each reader (x) appears once: a call's results
    are matched to its jobs by uid."""
    rounds: list[list[Pair]] = []
    for pair in pairs:
        free = next((r for r in rounds if all(q[0] != pair[0] for q in r)), None)
        if free is None:
            rounds.append([pair])
        else:
            free.append(pair)
    return rounds
