"""What each aggregated update does at the outer step: leave-one-out on the global model's real step.

    python -m benchmarks.bench_outer_step [--quick] [--scenario NAME] [--seed K] [--windows N] [--pages P]

LossScore reads an update at β (and its retention at 5 β); the global model moves at the outer step
(12.5 β at the demo's sizing) with the weighted mean of the selected updates. This benchmark runs one
`bench_fidelity` scenario and, after every window that aggregated two updates or more, measures on
`--pages` probe pages (a fixed draw per window, independent of the validator's secret pages):
- `renormalised`: the held-out loss of the window's aggregate minus that of the aggregate without
  peer i, the others' coefficients scaled up to the same sum (what dropping i from the selection
  would do); > 0: i costs the step loss. Paired over pages: its t.
- `added`: the same without rescaling (peer i's term added on top of the others' as they are),
  ÷ i's coefficient: the outer-step gain per unit of weight, and that ÷ the window's median
  (`relative_added_gain`).
Before measuring, it rebuilds the window's aggregate from the report (the selected updates, their
coefficients and the recorded clip reference) on a copy of the model at the window's base, and
checks that it equals the model the validator advanced to (`step_matches`): the figures are the
validator's own step. Per behaviour the last line gives the mean and range of each figure over the
windows after the warm-up, and the run's final held-out loss (`bench_fidelity`'s pages).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean, median
from typing import Any

import torch
from scipy.stats import ttest_rel

from benchmarks.bench_fidelity import WARMUP, scenarios, seeded
from scoring.aggregation import aggregate_into
from scoring.corpus import generate_corpus
from scoring.data import Dataset, batches, derive_seed, draw_pages
from scoring.loss_score import PagedLoss, paged_loss
from scoring.model import LlamaModel
from scoring.types import SparseParam
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers

Update = Mapping[str, SparseParam]


def stepped(
    base: LlamaModel,
    updates: Sequence[Update],
    weights: Sequence[float],
    reference: dict[str, float],
    lr: float,
) -> LlamaModel:
    """A copy of `base` advanced by the weighted, clipped aggregate of `updates`."""
    model = copy.deepcopy(base)
    aggregate_into(dict(model.named_parameters()), updates, reference, lr, weights)
    return model


def paired_t(a: PagedLoss, b: PagedLoss) -> tuple[float, float]:
    """Mean of the per-page differences a − b and their paired t (SciPy's; 0 when every page moved
    alike, where it is not defined)."""
    t = float(ttest_rel(a.pages, b.pages).statistic)
    return fmean(x - y for x, y in zip(a.pages, b.pages, strict=True)), t if math.isfinite(t) else 0.0


def measure(
    base: LlamaModel, updates: Sequence[Update], weights: Sequence[float], reference: dict[str, float],
    lr: float, probe: Sequence[torch.Tensor],
) -> list[dict[str, float]]:  # fmt: skip
    """Each member's `renormalised` (Δ, t) and `added` gain per unit weight (module docstring)."""
    full = paged_loss(stepped(base, updates, weights, reference, lr), probe)
    rows = []
    for i, w in enumerate(weights):
        rest = [j for j in range(len(updates)) if j != i]
        others = [updates[j] for j in rest]
        kept = [weights[j] for j in rest]
        scale = sum(weights) / sum(kept) if sum(kept) > 0 else 1.0
        without = paged_loss(stepped(base, others, [c * scale for c in kept], reference, lr), probe)
        added = paged_loss(stepped(base, others, kept, reference, lr), probe)
        delta, t = paired_t(full, without)
        rows.append(
            {
                "weight": w,
                "renormalised": delta,
                "renormalised_t": t,
                "added": (added.mean - full.mean) / w if w > 0 else float("nan"),
            }
        )
    gains = median(r["added"] for r in rows)
    for r in rows:
        r["relative_added_gain"] = r["added"] / gains if gains > 0 else float("nan")
    return rows


def run(
    scenario: str, seed: int, windows: int, n_pages: int, root: Path, *, quick: bool = False
) -> dict[str, Any]:
    seeded(seed)
    workdir = root / f"{scenario}-{seed}"
    workdir.mkdir(parents=True)
    # bench_fidelity's corpus and sizing, so that the same scenario and seed end at its final loss
    generate_corpus(
        workdir / "corpus", seed=0, n_tokens=300_000 if quick else 1_500_000, shard_tokens=150_000
    )
    peers = parse_peers(scenarios(False)[scenario])
    # quick: enough inner steps that two peers prove their training and are aggregated together
    runner = DemoRunner(DemoConfig(peers, windows=windows, workdir=workdir, inner_steps=5 if quick else 20))
    if n_pages > runner.dataset.n_pages:  # before the first window, not after it
        raise SystemExit(f"--pages: at most {runner.dataset.n_pages} (the corpus's pages), not {n_pages}")
    behaviour = runner.network.behaviour_of()
    dataset: Dataset = runner.dataset
    cfg = runner.round.cfg
    per: dict[str, list[dict[str, float]]] = defaultdict(list)
    matches = []
    first = runner.next_window
    for window in range(first, first + windows):
        runner.publish(window)
        base = copy.deepcopy(runner.state.model.model)
        report = runner.validate(window)
        sel = report.selection
        record = runner.round.ledger.window_detail(window)
        if len(sel.gather) < 2 or record is None:
            continue
        updates = {p.hotkey: p.update.params for p in report.peers if p.update is not None}
        chosen = [updates[h] for h in sel.gather]
        # no weights: the plain mean, as GlobalModel.advance takes it
        weights = list(sel.weights) or [1.0 / len(chosen)] * len(chosen)
        reference = dict(record.clip_reference)
        # the validator sums in digest order; any order is the same step up to rounding
        mine = stepped(base, chosen, weights, reference, cfg.outer_lr)
        after = dict(runner.state.model.model.named_parameters())
        matches.append(max(float((p - after[n]).detach().abs().max()) for n, p in mine.named_parameters()))
        probe = batches(
            dataset, draw_pages(derive_seed("bench-outer-step", window), n_pages, dataset.n_pages), 8
        )
        rows = measure(base, chosen, weights, reference, cfg.outer_lr, probe)
        if window - first >= WARMUP:
            for hotkey, row in zip(sel.gather, rows, strict=True):
                per[behaviour.get(hotkey, "?")].append(row)
        named = [[behaviour.get(h, "?"), r] for h, r in zip(sel.gather, rows, strict=True)]
        print(window, json.dumps(named), file=sys.stderr, flush=True)
    return {
        "scenario": scenario,
        "seed": seed,
        "final_loss": runner.heldout_loss(),
        "step_matches": max(matches) < 1e-5 if matches else None,  # None: no window aggregated two
        "step_max_abs_diff": max(matches, default=None),
        "behaviours": {name: summarise(rows) for name, rows in sorted(per.items())},
    }


def summarise(rows: Sequence[dict[str, float]]) -> dict[str, Any]:
    def spread(key: str) -> list[float]:
        values = [r[key] for r in rows]
        return [round(min(values), 4), round(fmean(values), 4), round(max(values), 4)]

    return {
        "windows": len(rows),
        "renormalised_t": spread("renormalised_t"),  # min, mean, max
        "renormalised_costs": sum(1 for r in rows if r["renormalised_t"] > 2.0),
        "relative_added_gain": spread("relative_added_gain"),
        "added_helps": sum(1 for r in rows if r["added"] > 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="honest_only, 4 windows, H = 5, 4 probe pages")
    parser.add_argument("--scenario", default="graded", choices=sorted(scenarios(False)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--pages", type=int, default=16, help="probe pages per window")
    args = parser.parse_args()
    if args.windows <= WARMUP or args.pages < 2:
        parser.error(f"need --windows > {WARMUP} (the warm-up) and --pages >= 2")
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="gauntlet-outer-step-"))
    if args.quick:
        figures = run("honest_only", 0, WARMUP + 1, 4, root, quick=True)  # window 4 aggregates four
    else:
        figures = run(args.scenario, args.seed, args.windows, args.pages, root)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
