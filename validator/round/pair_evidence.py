"""Evidence about pairs of peers that outlives the window, folded into the ratings after it: links
(updates that keep resembling each other: scoring/links.py) and the claims of senders tied by copy
findings (whose update they sent: scoring/claims.py). Both are stored on the peers' ratings, so
each window records them and replay re-derives them from the ratings before the window."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from scoring.claims import ClaimBook, ClaimConfig, update_claims
from scoring.links import LinkConfig, update_links
from scoring.ranking import RatingState
from scoring.uniqueness import CopyCheck, unclear_pairs
from validator.round.outcomes import PeerWindow, page_tests

V = TypeVar("V", float, int)


def with_pair_evidence(
    rated: RatingState,
    copies: CopyCheck,
    peers: Sequence[PeerWindow],
    links_cfg: LinkConfig,
    claims_cfg: ClaimConfig,
) -> RatingState:
    """`rated` with this window's links and claims."""
    before = {h: p.links for h, p in rated.peers.items() if p.links}
    links = update_links(before, copies.compared, copies.resemblances, links_cfg)
    held = ClaimBook(
        {h: p.claims for h, p in rated.peers.items() if p.claims},
        {h: p.claim_windows for h, p in rated.peers.items() if p.claim_windows},
    )
    claims = update_claims(held, tied_pairs(copies), page_tests(peers), copies.readings, claims_cfg)
    # A detached peer (its uid taken, its ban remembered) submits nothing: links to it would never
    # fade, and keep its partner out of the residual consensus until the ban ends.
    live = {h for h, p in rated.peers.items() if not p.detached}
    return RatingState(
        {
            h: replace(
                p,
                links=_live(links.get(h, {}), live),
                claims=_live(claims.mean.get(h, {}), live),
                claim_windows=_live(claims.windows.get(h, {}), live),
            )
            if h in live
            else replace(p, links={}, claims={}, claim_windows={})
            for h, p in rated.peers.items()
        },
        rated.window,
    )


def tied_pairs(copies: CopyCheck) -> list[tuple[str, str]]:
    """The window's pairs of which at most one is aggregated for a copy finding: its unclear
    findings, one payload's senders among them (scoring/twins.py)."""
    return sorted(unclear_pairs(copies.findings))


def _live(evidence: Mapping[str, V], live: set[str]) -> dict[str, V]:
    return {o: v for o, v in evidence.items() if o in live}
