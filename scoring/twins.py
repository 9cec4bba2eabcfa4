"""Which of a window's resembling peers may be aggregated (scoring/selection.py).

Two kinds of evidence tie peers together. A copy finding whose upload order was unclear
(scoring/uniqueness.py) names a pair of which at most one is aggregated: nobody is penalised, and
the one kept is the one the validator saw upload (a peer whose store hid from its polls made itself
unobservable, and a well-rated thief re-signing a victim's bytes that way took the victim's place),
then the better rated, then the earlier seen (the hotkey only breaks equal times). Links
(scoring/links.py) tie peers whose updates kept resembling each other across windows: a ring of
three or more linked peers, each tied to two others of it (colluders sharing a hidden direction),
is left out entirely, whether or not each of them would have been aggregated (`core`); a star,
one peer tied to others that do not resemble each other, loses its hub (`dominated`).

A group tied by copy findings is judged by who in it would be aggregated, and identical payloads
count as one update: otherwise two identities re-signing a victim's bytes from stores the polls never
reached (an unclear order) made a group of three with the victim and sank it, for nothing.

Of a group tied by copy findings only, whose assigned pages the update was trained on decides before
the rating does (`owners`): each side of an unclear pair was evaluated on its own pages
(scoring/page_test.py), and a copy, or another peer's update computed from public inputs and
published first, gains on the pages its author was assigned, not on its sender's. A sender whose
page test reads `OWNERSHIP_MARGIN` under a partner's is left out whether or not the other is
aggregated (a proven frontrunner was aggregated, and paid, for a newcomer's work while the
newcomer proved its own training), and out of the rating match (scoring/selection.py). Where the
two sent different payloads each update is also read on the other's pages, and the own tests and
those readings must agree, to leave a sender out or to rank one above the other
(scoring/authorship.py). A pair tied in earlier windows is read over all of them (scoring/claims.py):
in one window an author's own pages can read no better than its frontrunner's by chance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from scoring.authorship import NO_READINGS, Readings, claim_gap, crowd_lead, orders_agree

Pair = tuple[str, str]
# How far (in page-test t) a sender's own pages must read under another sender's for the update not
# to be its. Pages an update never saw read t ~ N(0, 1); its author's pages read 2.3 ± 1.4 a window
# for a full honest peer and 0.84 ± 1.19 for a ⅒-steps one (docs/fidelity-log.md, seventeenth
# round). Modelled as normal, at 1.0 an author is disowned by its copier in about 3 % (full) and
# 12 % (⅒ steps) of windows and a full author's copier is caught in 78 %; at 1.5, 1.4 %, 6.5 % and 68 %.
OWNERSHIP_MARGIN = 1.0
# A pair whose link evidence reached this share of the alarm closes a ring (`core`) without being a
# twin itself: colluders' pairs reach the alarm a window or two apart, and in the window only two
# of three had, the star they formed kept two colluders (`bench_fidelity`'s `collude`, seed 0,
# window 3). An honest pair of authors a blend ties measures no evidence at all.
NEAR_TIE = 0.5


@dataclass(frozen=True, slots=True)
class Twins:
    copies: Sequence[Pair] = ()  # copy findings of this window whose upload order was unclear
    same: Sequence[Pair] = ()  # those of them that sent the same payload (equal digests)
    linked: Sequence[Pair] = ()  # pairs linked across windows whose order this window is unclear
    seen: Mapping[str, float] = field(default_factory=dict)  # upload times the validator saw (inf: none)
    page_t: Mapping[str, float] = field(
        default_factory=dict
    )  # this window's page test t of each evaluated peer
    # each flagged pair's updates read on the other sender's pages (scoring/authorship.py)
    readings: Readings = field(default_factory=dict)
    # pairs whose link evidence reached `NEAR_TIE` × the alarm: ties that make a ring (`core`), no more
    near: Sequence[Pair] = ()
    # each tied pair's claim gap over the windows it was tied (scoring/claims.py), read in place of
    # this window's where both senders were evaluated
    claims: Mapping[Pair, float] = field(default_factory=dict)


NO_TWINS = Twins()


@dataclass(frozen=True, slots=True)
class Verdict:
    grouped: frozenset[str]  # left out with their whole group (a colluding cluster)
    lesser: frozenset[str]  # left out for a better-rated twin
    disowned: frozenset[str] = frozenset()  # left out: its update was trained on another sender's pages


def judge_twins(
    present: Collection[str], kept: Collection[str], final: Callable[[str], float], twins: Twins
) -> Verdict:
    """`present`: the window's candidates; `kept`: those the selection would aggregate otherwise;
    `final`: a kept peer's final score."""

    def rank(k: str, by_pages: bool = False) -> tuple[bool, float, float, float, str]:  # best first
        seen, pages = twins.seen.get(k, math.inf), standing.get(k, -math.inf) if by_pages else 0.0
        return math.isinf(seen), -pages, -final(k), seen, k

    linked = [(a, b) for a, b in twins.linked if a in present and b in present]
    grouped = core(linked, twins.near)
    copied = [(a, b) for a, b in [*twins.copies, *twins.same] if a in present and b in present]
    disowned = owners(copied, twins.page_t, twins.readings, claims=twins.claims)
    standing = standings(copied, twins)
    alive = set(kept) - grouped - disowned
    # one update's senders are tied among themselves too, not only through the one each was matched
    # with: that one left out (unproven, rated low), every other sender was aggregated
    one_update = [
        sorted(g & alive) for g in clusters([p for p in twins.same if p[0] in present and p[1] in present])
    ]
    same_pairs = [*twins.same, *((g[0], k) for g in one_update for k in g[1:])]
    pairs = [(a, b) for a, b in [*twins.copies, *twins.linked, *same_pairs] if a in alive and b in alive]
    lesser: set[str] = set()
    for group in clusters(pairs):
        same = [(a, b) for a, b in same_pairs if a in group and b in group]
        updates = len(clusters(same)) + len(group - {k for pair in same for k in pair})
        # the sender whose own pages gained most first (module docstring), unless the readings of
        # each update on the other's pages disagree (scoring/authorship.py)
        by_pages = orders_agree(group, twins.page_t, twins.readings)
        order = sorted(group, key=lambda k: rank(k, by_pages))
        if updates > 2:  # three or more distinct updates: a ring of them steers nothing (`core`)
            edges = [(a, b) for a, b in pairs if a in group and b in group]
            ring = core(edges, twins.near)
            grouped |= ring
            lesser |= dominated([k for k in order if k not in ring], edges)
        else:
            lesser |= set(order[1:])
    return Verdict(frozenset(grouped), frozenset(lesser), frozenset(disowned & set(kept)))


def standings(pairs: Sequence[Pair], twins: Twins) -> dict[str, float]:
    """Each evaluated sender's page test this window, moved by how much better its claims over its
    tied partners read over the windows they were tied than this window (scoring/claims.py), the
    order of twins. Each tied pair asks that the two standings differ by the two page tests'
    difference moved by half of each direction's (this window's gap − the running one): of two
    senders, the one whose running claim reads over the other's is first, and in a pair's first
    window the page tests alone order them. A group of three or more senders is fitted to its
    pairs by least squares (anchored, weakly, at the page tests): an author copied by a crowd is
    then ordered against each copy by that pair's claim. Moved by the mean over its partners
    instead, the author's record against the one lucky copy counted an eighth among eight copies
    (`copy_crowd` under seed 2, window 7: a copy aggregated in its victim's place)."""
    t = twins.page_t
    shift: dict[Pair, float] = {}  # (k, j): the standing of k less j's, beyond t_k − t_j
    for a, b in sorted({tuple(sorted(p)) for p in pairs if p[0] in t and p[1] in t and p[0] != p[1]}):
        moved = []
        for x, p in ((a, b), (b, a)):
            now = claim_gap(x, p, t, twins.readings)
            moved.append(0.0 if now is None else now - twins.claims.get((x, p), now))
        shift[(a, b)] = (moved[0] - moved[1]) / 2.0
    out = {k: t[k] for k in t}
    for group in clusters(list(shift)):
        keys = sorted(group)
        if len(keys) == 2:  # exactly: each moved by half of its own direction's shift
            (a, b), value = keys, shift[(keys[0], keys[1])]
            out[a], out[b] = t[a] + value / 2.0, t[b] - value / 2.0
            continue
        at = {k: i for i, k in enumerate(keys)}
        system = np.eye(len(keys)) * ANCHOR
        target = np.array([ANCHOR * t[k] for k in keys])
        for (a, b), value in shift.items():
            if a in at:
                i, j, want = at[a], at[b], t[a] - t[b] + value
                system[i, i] += 1.0
                system[j, j] += 1.0
                system[i, j] -= 1.0
                system[j, i] -= 1.0
                target[i] += want
                target[j] -= want
        out.update(zip(keys, (float(v) for v in np.linalg.solve(system, target)), strict=True))
    return out


# How strongly a group's standings are held at their page tests (`standings`): only enough to fix
# the level a fit of differences leaves free; a pair's claims decide its order.
ANCHOR = 1e-3


def core(pairs: Sequence[Pair], near: Sequence[Pair] = ()) -> set[str]:
    """The keys of `pairs` every one of which is tied to two others of them (the 2-core, `near`
    ties among those keys counting too): a ring of resembling peers, as colluders sharing one
    hidden direction form, is left out whole. A star is not one: a peer that blends two others'
    updates (or copies from both) ties them only through itself, and grouping the three left both
    authors out of the aggregate and the match (a red-team run: one proven identity sending two
    honest peers' mean for three windows, linked to both)."""
    keys = {k for pair in pairs for k in pair}
    ties = partners([*pairs, *((a, b) for a, b in near if a in keys and b in keys)])
    while weak := {k for k, others in ties.items() if len(others) < 2}:
        ties = {k: others - weak for k, others in ties.items() if k not in weak}
    return set(ties)


def dominated(order: Sequence[str], pairs: Sequence[Pair]) -> set[str]:
    """Of keys tied by `pairs` outside any ring, the best first (`order`) is kept and every key tied
    to one kept is left out: at most one of each pair, and a hub tied to two kept peers goes."""
    ties = partners(pairs)
    kept: set[str] = set()
    out: set[str] = set()
    for k in order:
        (out if ties.get(k, set()) & kept else kept).add(k)
    return out


def owners(
    pairs: Sequence[Pair],
    page_t: Mapping[str, float],
    readings: Readings = NO_READINGS,
    margin: float = OWNERSHIP_MARGIN,
    claims: Mapping[Pair, float] | None = None,
) -> set[str]:
    """The senders tied by copy findings whose claim to the update reads at least `margin` under one
    of their own partners' (the peers a finding ties them to; scoring/authorship.py `claim_gap`:
    for one payload, their own page tests), plus what the best of that many partners reads by
    chance alone (`crowd_lead`): the update (or the one it copies) was trained on somebody else's
    pages.
    Partners only, not the whole group a chain of findings ties: a blend of two peers' updates tied
    the two, whose updates are their own, and the one whose pages read lower was left out
    (`bench_fidelity`'s `blend` at `1356843`: honest coverage 1.00 → 0.75). A sender not evaluated
    is not judged. `claims`: a pair's gap over the windows it was tied (scoring/claims.py), read in
    place of this window's."""
    out: set[str] = set()
    claims = claims or {}
    for key, others in partners(pairs).items():
        gaps = [
            claims.get((key, j), gap)
            for j in others
            if (gap := claim_gap(key, j, page_t, readings)) is not None
        ]
        if gaps and max(gaps) >= margin + crowd_lead(len(gaps)):
            out.add(key)
    return out


def paired_t(
    pairs: Sequence[Pair], page_t: Mapping[str, float], unproven: Collection[str]
) -> dict[str, float]:
    """The page test each sender's proof of training reads this window (scoring/proof.py): its own
    t, except for a sender that has not proven its training and is tied by a copy finding to
    evaluated peers that have. Of one update, the pages of its author gain and the others' read
    t ~ N(0, 1), so a copier evaluated beside its proven victim in every window drew a fresh chance
    to prove training it never did (a blend of two proven peers' updates proved and was aggregated
    in the mixed run once copies were evaluated); such a sender reads (t − reference) / √2, the
    reference being those partners' best less what the best of that many reads by chance, floored
    at 0 (a partner whose pages the update harms must not lift it). An author beside a proven
    frontrunner proves, more slowly (2.3 / √2 a window for a full honest peer); a copier's evidence
    falls. Unproven partners do not count: two peers in their warm-up tied by a blend each read
    their proof against it, and one was aggregated from window 7 instead of 4 (`blend` under seed 1,
    coverage 0.75).

    The readings of each update on the other's pages (scoring/authorship.py) are not used here:
    taking the lower of the two readings kept a full honest peer falsely paired with another
    unproven a window longer in `weak_half` (seed 1), whose window then aggregated only its weak
    peers, and the run ended 48 % above it (2.1765 → 3.2250). A copier that adds training on its
    own pages still proves on its own raised test (open)."""
    out = dict(page_t)
    for key, others in partners(pairs).items():
        read = [page_t[j] for j in others if j in page_t and j not in unproven]
        if key in unproven and key in page_t and read:
            reference = max(0.0, max(read) - crowd_lead(len(read)))
            out[key] = (page_t[key] - reference) / math.sqrt(2.0)
    return out


def partners(pairs: Sequence[Pair]) -> dict[str, set[str]]:
    """Each key's partners in `pairs`, in a deterministic order of keys."""
    out: dict[str, set[str]] = {}
    for a, b in sorted(pairs):
        out.setdefault(a, set()).add(b)
        out.setdefault(b, set()).add(a)
    return out


def clusters(pairs: Sequence[Pair]) -> list[set[str]]:
    """Connected groups of keys linked by `pairs`, in a deterministic order."""
    groups: list[set[str]] = []
    for a, b in sorted(tuple(sorted(p)) for p in pairs):
        touching = [g for g in groups if a in g or b in g]
        merged = {a, b}.union(*touching)
        groups = [g for g in groups if g not in touching] + [merged]
    return sorted(groups, key=min)
