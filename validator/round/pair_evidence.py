"""Evidence about pairs of peers that outlives the window, folded into the ratings after it: links
(updates that keep resembling each other: scoring/links.py) and the claims of senders tied by copy
findings (whose update they sent: scoring/claims.py). Both are stored on the peers' ratings, so
each window records them and replay re-derives them from the ratings before the window."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from scoring.claims import ClaimBook, ClaimConfig, update_claims
from scoring.links import LinkConfig, update_links
from scoring.ranking import RatingState
from scoring.uniqueness import CopyCheck, unclear_pairs
from validator.round.outcomes import PeerWindow, page_tests


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
    # fade, and keep its partner out of the residual consensus until the ban ends. Claims stay, about
    # peers gone too: they are read only when the pair is tied again, and one that left and came back
    # must not read one window's claim again (scoring/claims.py `_held`). `max_partners` bounds them.
    live = {h for h, p in rated.peers.items() if not p.detached}
    return RatingState(
        {
            h: replace(
                p,
                links={o: v for o, v in links.get(h, {}).items() if o in live} if h in live else {},
                claims=claims.mean.get(h, {}),
                claim_windows=claims.windows.get(h, {}),
            )
            for h, p in rated.peers.items()
        },
        rated.window,
    )


def tied_pairs(copies: CopyCheck) -> list[tuple[str, str]]:
    """The window's pairs of which at most one is aggregated for a copy finding: its unclear
    findings, one payload's senders among them (scoring/twins.py)."""
    return sorted(unclear_pairs(copies.findings))
