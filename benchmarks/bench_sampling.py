"""Who is evaluated when the budget cannot cover every peer: DESIGN's single draw against the tiers
of scoring/sampling.py, under a crowd of cheap identities.

    .venv/bin/python -m benchmarks.bench_sampling [--seeds N] [--windows N] [--quick]

A model of the ratings, not the demo: four proven honest peers (fixed ordinals 5-20), `k` identities
sending fresh noise (which passes every check made before evaluation), and an honest newcomer that
registers in window 30, after the crowd. Each evaluation folds a drawn outcome into the peer's real
rating with scoring/proof.py's `with_evidence`, and `proven` decides its standing, page test included:
an honest update reads page-test t ~ N(2.3, 1.4) and a relative margin ~ N(0.10, 0.10), +1 in 80 %
of evaluations (docs/fidelity-log.md); noise t ~ N(0, 1) and margin ~ N(0, 0.05), +1 in half. With
`--rotate` the crowd re-registers every ten windows: identities with `trial_evaluations` evaluations
come back under fresh hotkeys (a registration fee each on a real subnet).

Per (k, budget B), over windows 20 on: the share of windows an honest peer is evaluated (a peer not
evaluated is neither aggregated nor, beyond the windows a set covers, paid), and the windows the
newcomer takes to prove its training (median, 90th percentile, and how many runs it never did).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field, replace

import numpy as np

from scoring.proof import proven, with_evidence
from scoring.ranking import PeerOutcome, PeerRating, Status
from scoring.rating_config import RatingConfig
from scoring.sampling import History, SamplingConfig, history_of, sample_for_evaluation

RATING = RatingConfig()
SAMPLING = SamplingConfig()
NEWCOMER_AT = 30
MEASURED_FROM = 20


@dataclass
class Peer:
    kind: str  # honest, newcomer, noise
    rating: PeerRating
    ordinal: float = 0.0


def outcome(kind: str, hotkey: str, rng: np.random.Generator) -> PeerOutcome:
    honest = kind != "noise"
    score = 0.01 if honest else -0.01
    margin = rng.normal(0.10, 0.10) if honest else rng.normal(0.0, 0.05)
    positive = rng.random() < (0.8 if honest else 0.5)
    margin = abs(margin) if positive else -abs(margin)
    t = rng.normal(2.3, 1.4) if honest else rng.normal(0.0, 1.0)
    return PeerOutcome(
        hotkey, 0, Status.OK, score, 1 if positive else -1, own_gain=score + abs(score) * margin, own_t=t
    )


def proven_honest(hotkey: str, rng: np.random.Generator) -> PeerRating:
    rating = PeerRating(hotkey, 0, RATING.mu, RATING.sigma)
    while not proven(rating, RATING):
        rating = with_evidence(rating, outcome("honest", hotkey, rng), RATING)
    return rating


@dataclass
class Run:
    k: int
    budget: int
    tiers: bool
    seed: int
    rotate: bool
    peers: dict[str, Peer] = field(default_factory=dict)

    def history(self, window: int) -> History:
        """What the validator's draw reads (scoring/sampling.py `history_of`), with the model's fixed
        ordinals; DESIGN's single draw is every peer in the first tier."""
        ratings = {h: p.rating for h, p in self.peers.items()}
        standing = {h for h, r in ratings.items() if proven(r, RATING)} if self.tiers else set(ratings)
        return replace(
            history_of(ratings, standing, window), ratings={h: p.ordinal for h, p in self.peers.items()}
        )

    def play(self, windows: int) -> tuple[float, int | None]:
        rng = np.random.default_rng(self.seed)
        self.peers = {
            f"h{i}": Peer("honest", proven_honest(f"h{i}", rng), float(rng.uniform(5, 20))) for i in range(4)
        }
        self.peers |= {
            f"s{i:04d}": Peer("noise", PeerRating(f"s{i:04d}", 0, RATING.mu, RATING.sigma))
            for i in range(self.k)
        }
        evaluated, fresh, proof_after = 0, self.k, None
        for w in range(windows):
            if w == NEWCOMER_AT:
                self.peers["new"] = Peer("newcomer", PeerRating("new", 0, RATING.mu, RATING.sigma))
            if self.rotate and w and w % 10 == 0:
                for h in [
                    h
                    for h, p in self.peers.items()
                    if p.kind == "noise" and p.rating.evaluations >= SAMPLING.trial_evaluations
                ]:
                    del self.peers[h]
                    self.peers[f"s{fresh:04d}"] = Peer(
                        "noise", PeerRating(f"s{fresh:04d}", 0, RATING.mu, RATING.sigma)
                    )
                    fresh += 1
            chosen = sample_for_evaluation(
                sorted(self.peers), self.budget, self.history(w), w, self.seed * 7919 + w, SAMPLING
            )
            for p in self.peers.values():
                p.rating = replace(p.rating, windows_seen=p.rating.windows_seen + 1)
            for h in chosen:
                p = self.peers[h]
                p.rating = replace(with_evidence(p.rating, outcome(p.kind, h, rng), RATING), last_evaluated=w)
                if p.kind == "newcomer" and proven(p.rating, RATING):
                    p.ordinal = 2.0
                    proof_after = w - NEWCOMER_AT + 1 if proof_after is None else proof_after
            if w >= MEASURED_FROM:
                evaluated += sum(h in chosen for h in ("h0", "h1", "h2", "h3"))
        return evaluated / (4 * (windows - MEASURED_FROM)), proof_after


def cell(k: int, budget: int, tiers: bool, seeds: int, windows: int, rotate: bool) -> dict[str, object]:
    runs = [Run(k, budget, tiers, s, rotate).play(windows) for s in range(seeds)]
    waits = sorted(math.inf if r[1] is None else float(r[1]) for r in runs)
    finite = [w for w in waits if math.isfinite(w)]
    return {
        "honest_evaluated": round(float(np.mean([r[0] for r in runs])), 3),
        "newcomer_proof_median": float(np.median(waits)) if finite else None,
        "newcomer_proof_p90": float(np.percentile(finite, 90)) if len(finite) == len(waits) else None,
        "newcomer_never": len(waits) - len(finite),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--windows", type=int, default=150)
    parser.add_argument("--quick", action="store_true", help="two cells, 3 seeds, 60 windows")
    args = parser.parse_args()
    if args.seeds < 1 or args.windows <= NEWCOMER_AT:
        parser.error(
            f"need --seeds >= 1 and --windows > {NEWCOMER_AT}: the newcomer registers in that window"
        )
    crowds, budgets = ((40,), (8, 16)) if args.quick else ((8, 40, 200), (8, 16, 32))
    seeds, windows = (3, 60) if args.quick else (args.seeds, args.windows)
    out: dict[str, object] = {"seeds": seeds, "windows": windows, "newcomer_at": NEWCOMER_AT, "cells": []}
    for rotate in (False, True):
        for k in crowds:
            for b in budgets:
                row = {"k": k, "budget": b, "rotate": rotate}
                row |= {
                    name: cell(k, b, tiers, seeds, windows, rotate)
                    for name, tiers in (("design", False), ("tiers", True))
                }
                print(json.dumps(row), flush=True)
                out["cells"].append(row)  # type: ignore[attr-defined]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
