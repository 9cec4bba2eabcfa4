"""Peers whose updates keep sharing a direction beyond the honest consensus, window after window.

One window's residual similarity (scoring/similarity.py) separates copies from honest pairs, but
colluders who each add one hidden direction to honest training, with noise of their own, resemble
each other only a little: +0.06 … +0.20 per window at the demo's sizing, while honest pairs measured
−0.08 … +0.07 (mean −0.01). No single window tells them apart; the *persistence* does. Each pair
keeps a CUSUM of its similarities over the windows in which both were compared,

    evidence ← min(cap, max(0, evidence + min(similarity − reference, step_cap))),

and the pair is *linked* once the evidence reaches `alarm`. One window counts for at most
`step_cap`, so a link takes three windows of resemblance: honest pairs do resemble each other in
an odd window or two (in the mixed bench run an honest pair measured +0.077 then +0.120, as much as
the colluders' +0.117 that window, after a window below the reference), colluders in every window.
With the defaults colluders were linked in their third window, before proof of training lets them
be aggregated, and honest pairs never reached the alarm (bench_fidelity, 8 windows).
The cap bounds how long a pair that stopped resembling each other stays linked (≈ cap / reference
windows). A linked pair's upload order is no evidence of who copied whom, so nobody is penalised:
the selection treats it like an unclear copy pair (one of two is aggregated, a ring of three or
more none: scoring/twins.py `core`).

Peers already linked are still compared, but they leave the consensus the window's residuals are
taken against (scoring/uniqueness.py): colluders' shared direction in it tilted every honest
residual alike, and an honest pair reached the alarm in the mixed run's eighth window. Where fewer
than three compared peers are left in it, nothing resembles anything that window and the pairs
among the compared fade: frozen, a hub that had gone back to honest work kept its links, and its
partners were left out beside it. Colluders that are most of a window's proven peers fade too;
with that few honest peers no consensus tells them apart.

Evidence is stored on both peers' ratings (`PeerRating.links`), so it is recorded with every window
and replay re-derives it from the ratings before the window. Pairs below `reference` are not
reported by the copy check: such a pair counts as similarity 0 (it decays a little faster than a
plain CUSUM would, which only ever favours the pair).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LinkConfig:
    reference: float = 0.03  # above honest pairs' mean similarity (−0.01), below colluders' (+0.10)
    alarm: float = 0.08
    cap: float = 0.32
    step_cap: float = 0.035  # one window's most evidence: three windows reach the alarm, two do not
    max_partners: int = 16  # pairs kept per peer, strongest first: the state is stored every window

    def __post_init__(self) -> None:
        if not 0.0 <= self.reference < self.alarm <= self.cap:
            raise ValueError("need 0 <= reference < alarm <= cap")
        if self.step_cap <= 0.0:
            raise ValueError("step_cap must be > 0")
        if self.max_partners < 2:
            raise ValueError("max_partners must be >= 2 (a group of three is two partners each)")


Pair = tuple[str, str]


def update_links(
    links: Mapping[str, Mapping[str, float]],
    compared: Collection[str],
    similarity: Mapping[Pair, float],
    cfg: LinkConfig,
) -> dict[str, dict[str, float]]:
    """Every peer's evidence after one window: `links[a][b]` (symmetric), `compared` the peers whose
    updates were compared this window, `similarity` the pairs that reached `cfg.reference`."""
    present = set(compared)
    evidence: dict[Pair, float] = {}
    for a, others in links.items():
        for b, value in others.items():
            evidence[_pair(a, b)] = value
    for pair in set(evidence) | {_pair(a, b) for a, b in similarity}:
        a, b = pair
        if a not in present or b not in present:
            continue  # no new evidence about a pair unless both were compared
        seen = similarity.get(pair, 0.0)  # pairs come sorted, as `_pair` orders them
        step = min(seen - cfg.reference, cfg.step_cap)
        evidence[pair] = min(cfg.cap, max(0.0, evidence.get(pair, 0.0) + step))
    return _strongest(evidence, cfg.max_partners)


def _strongest(evidence: Mapping[Pair, float], per_peer: int) -> dict[str, dict[str, float]]:
    """The pairs with evidence, strongest first, each kept while both its peers have fewer than
    `per_peer` partners (symmetric). Every pair was kept: a crowd resembling each other held n²
    pairs in every rating state, and 256 identities stored 1.9 MB of links a window, for ever."""
    out: dict[str, dict[str, float]] = {}
    for (a, b), value in sorted(evidence.items(), key=lambda item: (-item[1], item[0])):
        if value > 0.0 and len(out.get(a, ())) < per_peer and len(out.get(b, ())) < per_peer:
            out.setdefault(a, {})[b] = value
            out.setdefault(b, {})[a] = value
    return {a: dict(sorted(partners.items())) for a, partners in sorted(out.items())}


def linked_pairs(links: Mapping[str, Mapping[str, float]], cfg: LinkConfig, share: float = 1.0) -> list[Pair]:
    """Pairs whose evidence reached `share` × the alarm, each once (a < b), sorted."""
    level = share * cfg.alarm
    return sorted({_pair(a, b) for a, others in links.items() for b, v in others.items() if v >= level})


def _pair(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)
