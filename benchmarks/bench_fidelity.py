"""Scoring fidelity: does honest work always count, do adversaries gain nothing, is training slowed?

    .venv/bin/python benchmarks/bench_fidelity.py [--quick] [--only NAME,NAME] [--windows N] [--seeds N]

Runs the demo's sizing (tiny model, H = 20, 8 windows) once per scenario, each in its own workdir:
honest peers alone, each built-in adversary with the honest peers, graded honest peers (and two
full peers with two weak ones, beside the two full peers alone), a mixed scenario with every
adversary of `ADVERSARIES` plus malformed junk, attempts to frame honest peers (`FRAMING`, read by
their coverage) and stronger variants of an adversary, alone (`VARIANTS`). Per scenario it reports:
- `loss_ratio`: the final held-out loss ÷ its reference run's (same pages, same seed): the
  honest-only run's, except for the scenarios made of honest peers of unequal work (`graded`,
  `weak_half`), whose reference is their full peers alone (`full_half`; see `REFERENCE`);
  `loss_ratio_honest_only` is every scenario's ratio to the honest-only run;
- `coverage`: the share of honest peers aggregated per window after the warm-up;
- `adversary_selections`: adversarial peers aggregated after the warm-up (window, peer pairs);
- `framed`: honest peers ever invalidated or banned;
- `spearman`: leaderboard position against true contribution, honest peers only;
- `adversary_weight`: the adversaries' share of the weights the validator has set on chain, the
  mean over windows after the warm-up and at the last window (`adversary_weight_last`): what
  cheating earns even when it is never aggregated; `honest_unpaid`: honest peers aggregated in a
  window after the warm-up whom that window's weights pay nothing (window × peer);
- `honest_negative`: honest peers whose ordinal is under 0 at the end (what they lost in matches
  to others, which no later window gives back); `board`: the leaderboard at the end, (behaviour,
  final score, ordinal) per peer in the API's order;
- `leaderboard_adversaries`: of the leaderboard's top places at the end (as many as there are honest
  peers, in the API's order, storage/ranking.py `rank_key`), how many adversaries hold;
- `drift_similarity_peak`, `drift_alarmed`, `drift_alarmed_honest`: the persistence check's figures
  (scoring/persistence.py): each behaviour's highest long-lag similarity, and the peers whose
  evidence reached the alarm, which `persistence_gate` (off by default) would have left out.
The warm-up is the first `WARMUP` windows: proof of training needs three evaluations (four when one
of them was −1, or when the page test's sum is not yet at 1.5: scoring/page_test.py), so honest
peers are first aggregated in window 3 or 4. The last line is one JSON object with every
scenario's figures and the targets of issue 12.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ["HOME"] = tempfile.mkdtemp(prefix="gauntlet-bench-home-")
os.environ.setdefault("OMP_NUM_THREADS", "1")
for _key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
    del os.environ[_key]

import torch  # noqa: E402

from scoring.corpus import generate_corpus  # noqa: E402
from scoring.persistence import over_alarm  # noqa: E402
from scoring.ranking import PeerRating  # noqa: E402
from storage.ranking import ranked as storage_ranked  # noqa: E402
from validator.demo.runner import DemoConfig, DemoRunner  # noqa: E402
from validator.demo.sim.behaviours import HONEST_CONTRIBUTION  # noqa: E402
from validator.demo.sim.plugins import parse_peers  # noqa: E402
from validator.demo.summary import DemoSummary  # noqa: E402

WARMUP = 3
HONEST = "honest:4"
ADVERSARIES = (
    "lazy", "copycat", "replay", "noise", "scaled", "stale", "late", "malformed", "free_rider",
    "noisy_copy", "blend", "split:2", "stale_copy", "collude:3", "poison", "sandbag", "sandbag_matched",
)  # fmt: skip
GRADED = "honest:2,honest_quarter:1,honest_tenth:1,honest_quarter_pages:1"
# half the honest peers weak: with a median clip reference their small norms clipped the full updates
WEAK_HALF = "honest:2,honest_quarter:1,honest_tenth:1"
MIXED = ",".join([HONEST, *(a if ":" in a else f"{a}:1" for a in ADVERSARIES), "malformed:2"])
# Graded peers are honest: the question is whether admitting them slows the network below what its
# full peers reach alone. Against `honest:4` the ratio would count the two full peers' missing work
# (`full_half` alone ends 2.1 % above it on this machine at c935ef0), which no validator can make up.
REFERENCE = {"graded": "full_half", "weak_half": "full_half"}
# Attempts to frame honest peers rather than to be aggregated: they are scored by honest coverage.
# `shrunk`: four identities whose honest updates are halved (more linear, a higher retention).
FRAMING = {
    "shrunk": f"{HONEST},shrunk:4",
    # uid 1's update computed from public inputs and published first (validator/demo/sim/adversaries.py)
    "frontrun": f"{HONEST},frontrun:1",
    "frontrun_proven": f"{HONEST},frontrun_proven:1",
    "frontrun_newcomer": f"newcomer:1,{HONEST},frontrun_newcomer:1",  # uid 1 joins in window 4
    "copy_crowd": f"{HONEST},copycat:8",  # eight copies of the first published update (scoring/twins.py)
    "boosted_copy": f"{HONEST},boosted_copy:1",  # a copy plus its own pages' training (scoring/authorship.py)
}
# Stronger variants of an adversary in the mix, measured alone beside the honest peers (the mixed
# scenario stays the one every round has measured): poison at twice its share of the norm, and `lazy`
# after three honest windows (`lapsed`: does a proof earned once carry a peer that stopped?), and six
# lazy identities instead of one (`lazy_crowd`: the proof is a test per peer, so its false positives
# add up over a crowd of identities that do not train on their own pages).
VARIANTS = {
    "poison_strong": f"{HONEST},poison_strong:1",
    "lapsed": f"{HONEST},lapsed:1",
    "lazy_crowd": f"{HONEST},lazy:6",
    "echo": f"{HONEST},echo:1",  # proven, then the mean of the others' updates (scoring/echo.py)
    "echo_noisy": f"{HONEST},echo_noisy:1",  # the same plus noise at twice its norm: a share of its own
    "frontrun_noisy": f"{HONEST},frontrun_noisy:1",  # frontrun_proven, its noise at 1× the update's RMS
}
TARGETS = {
    "coverage": 1.0,
    "adversary_selections": 0,
    "adversary_weight": 0.0,
    "leaderboard_adversaries": 0,
    "loss_ratio_max": 1.02,
    "spearman_min": 0.9,
    "framed": 0,
}


def scenarios(quick: bool) -> dict[str, str]:
    if quick:
        return {"honest_only": "honest:2", "mixed": "honest:2,noisy_copy:1,malformed:1,lazy:1"}
    out = {
        "honest_only": HONEST,
        "graded": GRADED,
        "weak_half": WEAK_HALF,
        "full_half": "honest:2",
        "mixed": MIXED,
    }
    for a in ADVERSARIES:
        name, _, count = a.partition(":")
        out[name] = f"{HONEST},{name}:{count or 1}"
    return out | FRAMING | VARIANTS


@dataclass
class DriftSeen:
    """What the persistence check measured (scoring/persistence.py): each behaviour's highest
    long-lag similarity, and the peers whose evidence reached the alarm, which the gate (off by
    default) would have left out: honest ones would have been framed."""

    peak: dict[str, float] = field(default_factory=dict)
    alarmed: dict[str, str] = field(default_factory=dict)  # hotkey → behaviour
    honest_alarmed: set[str] = field(default_factory=set)

    def add(self, runner: DemoRunner, behaviour: dict[str, str], honest: set[str]) -> None:
        cfg = runner.round.cfg.ranking.persistence
        for hotkey, rating in runner.state.ratings.peers.items():
            name = behaviour.get(hotkey)
            if name is None:
                continue
            if rating.drift_similarity is not None:
                self.peak[name] = max(self.peak.get(name, -1.0), rating.drift_similarity)
            if over_alarm(rating.drift, cfg):
                self.alarmed[hotkey] = name
                if hotkey in honest:
                    self.honest_alarmed.add(hotkey)

    def figures(self) -> dict[str, Any]:
        return {
            "drift_similarity_peak": {k: round(v, 4) for k, v in sorted(self.peak.items())},
            "drift_alarmed": sorted(self.alarmed.values()),
            "drift_alarmed_honest": len(self.honest_alarmed),
        }


def run(name: str, peers: str, root: Path, corpus: Path, windows: int, inner_steps: int) -> dict[str, Any]:
    workdir = root / name
    workdir.mkdir(parents=True)
    (workdir / "corpus").symlink_to(corpus, target_is_directory=True)
    runner = DemoRunner(
        DemoConfig(parse_peers(peers), windows=windows, workdir=workdir, inner_steps=inner_steps)
    )
    behaviour = runner.network.behaviour_of()
    summary = DemoSummary(behaviour)
    honest = {h for h, b in behaviour.items() if b in HONEST_CONTRIBUTION}
    covered, adversary, framed, started = [], 0, set(), time.perf_counter()
    earned: list[float] = []
    honest_unpaid = 0
    drift = DriftSeen()
    first = runner.next_window
    for window in range(first, first + windows):
        runner.publish(window)
        report = runner.validate(window)
        summary.add(report, runner.heldout_loss())
        chosen = set(report.selection.gather)
        framed |= {p.hotkey for p in report.peers if p.hotkey in honest and p.status == "invalid"}
        framed |= {h for h, r in runner.state.ratings.peers.items() if h in honest and r.banned(window)}
        if window - first >= WARMUP:
            covered.append(len(chosen & honest) / max(len(honest), 1))
            adversary += len(chosen - honest)
            share, unpaid = adversary_share(runner, honest, chosen)
            earned.append(share)
            honest_unpaid += unpaid
        drift.add(runner, behaviour, honest)
    result = summary.to_json(runner.state.ratings)
    return {
        "peers": peers,
        "final_loss": runner.heldout_loss(),
        "coverage": min(covered) if covered else None,
        "mean_coverage": sum(covered) / len(covered) if covered else None,
        "adversary_selections": adversary,
        "framed": len(framed),
        "spearman": result["spearman"],
        "adversary_weight": round(sum(earned) / len(earned), 4) if earned else None,
        "adversary_weight_last": round(earned[-1], 4) if earned else None,
        "honest_unpaid": honest_unpaid,
        "leaderboard_adversaries": leaderboard_adversaries(runner, honest),
        "honest_negative": honest_negative(runner, honest),
        "board": board(runner, behaviour),
        "selected_behaviours": [w["selected_behaviours"] for w in result["windows"]],
        "seconds": round(time.perf_counter() - started, 1),
    } | drift.figures()


def leaderboard_adversaries(runner: DemoRunner, honest: set[str]) -> int:
    """How many of the leaderboard's top places, as many as there are honest peers, peers that are
    not honest hold at the end (the API's order, `rank_key`)."""
    return sum(1 for r in ranked(runner)[: len(honest)] if r.hotkey not in honest)


def honest_negative(runner: DemoRunner, honest: set[str]) -> int:
    """Honest peers whose ordinal (μ − 3σ) is under 0 at the end, so at a final score of 0."""
    return sum(1 for h, r in runner.state.ratings.peers.items() if h in honest and r.ordinal < 0.0)


def board(runner: DemoRunner, behaviour: dict[str, str]) -> list[tuple[str, float, float]]:
    """The leaderboard at the end in the API's order: (behaviour, final score, ordinal) per peer."""
    return [(behaviour.get(r.hotkey, "?"), round(r.final, 2), round(r.ordinal, 2)) for r in ranked(runner)]


def ranked(runner: DemoRunner) -> list[PeerRating]:
    return storage_ranked(runner.state.ratings.peers.values())  # the API's board


def adversary_share(runner: DemoRunner, honest: set[str], chosen: set[str]) -> tuple[float, int]:
    """The share of the validator's weights on chain after the window (its last `set_weights`: a
    skipped set leaves the earlier one) held by peers that are not honest, and how many honest peers
    aggregated this window they pay nothing."""
    mine = [s for s in runner.chain.weight_sets() if s.hotkey == runner.validator_hotkey]
    weights = mine[-1].weights if mine else {}
    uids = {h: r.uid for h, r in runner.state.ratings.peers.items()}
    total = sum(weights.values())
    share = sum(weights.get(u, 0.0) for h, u in uids.items() if h not in honest) / total if total > 0 else 0.0
    return share, sum(1 for h in chosen & honest if weights.get(uids[h], 0.0) <= 0.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="3 windows, two small scenarios, H = 2")
    parser.add_argument("--only", default="", help="comma-separated scenario names (honest_only always runs)")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=1, help="repeat under N public seeds and secrets")
    args = parser.parse_args()
    if args.windows < 1 or args.seeds < 1:
        parser.error("--windows and --seeds: at least 1 (the README's long runs use --windows 24)")
    torch.set_num_threads(1)
    windows, inner = (WARMUP + 1, 2) if args.quick else (args.windows, 20)
    chosen = scenarios(args.quick)
    if args.only:
        only = args.only.split(",")
        if unknown := sorted(set(only) - chosen.keys()):  # a typo would silently run honest_only alone
            parser.error(f"--only: unknown scenario {', '.join(unknown)}; known: {', '.join(chosen)}")
        keep = {"honest_only", *only, *(REFERENCE[n] for n in only if n in REFERENCE)}
        chosen = {k: v for k, v in chosen.items() if k in keep}
    root = Path(tempfile.mkdtemp(prefix="gauntlet-fidelity-"))
    corpus = root / "corpus"
    generate_corpus(corpus, seed=0, n_tokens=300_000 if args.quick else 1_500_000, shard_tokens=150_000)
    runs = []
    for k in range(max(args.seeds, 1)):
        seeded(k)
        figures: dict[str, Any] = {}
        for name, peers in chosen.items():
            figures[name] = run(f"{name}-{k}", peers, root, corpus, windows, inner)
            print(name, k, json.dumps(figures[name]), file=sys.stderr, flush=True)
        base = figures["honest_only"]["final_loss"]
        for name, f in figures.items():
            reference = REFERENCE.get(name, "honest_only")
            f["reference"] = reference
            f["loss_ratio"] = f["final_loss"] / figures[reference]["final_loss"]
            f["loss_ratio_honest_only"] = f["final_loss"] / base
        runs.append(figures)
    figures = runs[0]  # seed 0: the default public seed and secret, as before
    if len(runs) > 1:  # the final loss is chaotic at this sizing: each figure under every seed
        for name, f in figures.items():
            f["seeds"] = {key: [r[name][key] for r in runs] for key in SPREAD}
    print(json.dumps({"windows": windows, "warmup": WARMUP, "targets": TARGETS, "scenarios": figures}))


SPREAD = (
    "loss_ratio", "loss_ratio_honest_only", "coverage", "adversary_selections", "adversary_weight",
    "honest_unpaid", "leaderboard_adversaries", "honest_negative", "framed", "spearman",
)  # fmt: skip


def seeded(k: int) -> None:
    """Run `k` of `--seeds`: 0 keeps the demo's public seed and secret; others change both, so the
    peers' pages, the held-out pages and every sample differ."""
    for key in ("GAUNTLET_PUBLIC_SEED", "GAUNTLET_VALIDATOR_SECRET"):
        os.environ.pop(key, None)
    if k:
        os.environ["GAUNTLET_PUBLIC_SEED"] = f"bench-fidelity-{k}"
        os.environ["GAUNTLET_VALIDATOR_SECRET"] = f"bench-fidelity-secret-{k}"


if __name__ == "__main__":
    main()
