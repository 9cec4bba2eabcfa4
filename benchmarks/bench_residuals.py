"""Do a peer's residuals persist across windows? The diagnostic behind docs/fidelity-log.md's "measured and
not adopted" persistence figures (issue 12: a peer adding one fixed direction to honest work).

    .venv/bin/python -m benchmarks.bench_residuals [--quick] [--peers SPEC] [--seeds N] [--windows N]
        [--sketch-bits N] [--skip N]

Runs the demo's sizing (as bench_fidelity) and decodes every peer's published update each window
with the validator's own decoder. Per peer and window, its residual is `r = u − βc`: `c` the mean
of the other peers' updates, `β` the update's least-squares multiple of it (so a graded peer's
scaled-down consensus is not counted as its own). Per peer it reports:
- `persistence`: the mean cosine of a window's residual with the sum of its earlier ones (from
  its third update on); error feedback makes it negative for honest peers;
- `accumulation`: `|Σr|² / Σ|r|²` over every window (1 for a fixed residual, about 1/n for
  independent ones);
- `long_lag`: the mean cosine of two of its residuals at least `LONG_LAG` windows apart, the earlier
  one from window `--skip` + 1 on (error feedback's anti-correlation fades by then; a fixed hidden
  direction would not);
- `usefulness`: the cosine of its summed residuals with the gradient of the held-out loss (the
  demo's 32 fixed pages) at the last window's base model (positive: subtracting them lowers the
  loss); a persistent component that does not lower the loss dilutes it;
- `long_lag_sketch`: `long_lag` as a validator could keep it, from a count sketch of each update
  (the copy check's hashing, `--sketch-bits`, one hash for every window), residuals taken in
  sketch space;
- `cos_hidden`: the mean cosine of the update with its own hidden direction, or poison's for a
  peer without one (known to the benchmark only; ≈ 0 for honest peers).
The last line is one JSON object: every peer's figures and, per behaviour, their range.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ["HOME"] = tempfile.mkdtemp(prefix="gauntlet-bench-home-")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from benchmarks.bench_fidelity import seeded
from scoring.corpus import generate_corpus
from scoring.similarity import count_sketch
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.adversaries import Poison
from validator.demo.sim.context import Behaviour
from validator.demo.sim.craft import decode_dense, model_direction
from validator.demo.sim.plugins import parse_peers
from validator.stores.fetch_types import object_key

Vector = npt.NDArray[np.float64]
PEERS = "honest:4,poison:1,poison_strong:1,honest_quarter:1,honest_tenth:1,honest_quarter_pages:1"
LONG_LAG = 3
SKETCH_BITS = 16
SKETCH_SEED = 0


@dataclass
class Track:
    """One peer's running figures: its residuals' sum, and the residuals themselves in float32 (the
    long-lag figure pairs them; 8 windows of the demo's model take 24 MB per peer)."""

    behaviour: str
    skip: int = 0  # long-lag pairs start at this residual (0: the first window's)
    total: Vector | None = None
    squares: float = 0.0
    persistence: list[float] = field(default_factory=list)
    cos_hidden: list[float] = field(default_factory=list)
    kept: list[npt.NDArray[np.float32]] = field(default_factory=list)
    sketched: list[npt.NDArray[np.float32]] = field(default_factory=list)  # residuals' sketches
    usefulness: float | None = None

    def add(self, residual: Vector, update: Vector, hidden: Vector, gradient: Vector) -> None:
        if self.total is not None:
            self.persistence.append(cosine(residual, self.total))
        self.total = residual.copy() if self.total is None else self.total + residual
        self.squares += float(residual @ residual)
        self.cos_hidden.append(cosine(update, hidden))
        self.kept.append(residual.astype(np.float32))
        self.usefulness = cosine(self.total, gradient)

    def long_lag(self, sketched: bool = False) -> float | None:
        vectors = self.sketched if sketched else self.kept
        pairs = [
            cosine(a.astype(np.float64), b.astype(np.float64))
            for i, a in enumerate(vectors) if i >= self.skip for b in vectors[i + LONG_LAG :]
        ]  # fmt: skip
        return round(float(np.mean(pairs)), 4) if pairs else None

    def figures(self) -> dict[str, Any]:
        later = self.persistence[1:]  # the second residual against the first alone is noisier
        total = self.total
        accumulation = float(total @ total) / self.squares if total is not None and self.squares else None
        return {
            "behaviour": self.behaviour,
            "persistence": round(float(np.mean(later)), 4) if later else None,
            "accumulation": None if accumulation is None else round(accumulation, 4),
            "long_lag": self.long_lag(),
            "long_lag_sketch": self.long_lag(sketched=True),
            "usefulness": None if self.usefulness is None else round(self.usefulness, 4),
            "cos_hidden": round(float(np.mean(self.cos_hidden)), 4) if self.cos_hidden else None,
        }


def cosine(a: Vector, b: Vector) -> float:
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denominator if denominator > 0.0 else 0.0


def flat(dense: Mapping[str, torch.Tensor], names: list[str]) -> Vector:
    out: Vector = np.concatenate([dense[n].flatten().double().numpy() for n in names])
    return out


def published(runner: DemoRunner, window: int) -> dict[int, Vector]:
    """Every peer's update this window as the validator decodes it, flattened (uid → vector)."""
    model = runner.state.model.model
    names = [n for n, _ in model.named_parameters()]
    out: dict[int, Vector] = {}
    for peer in runner.network.peers:
        path = Path(str(peer.location.path)) / object_key(window, peer.hotkey)
        if path.is_file() and (dense := decode_dense(path.read_bytes(), model, runner.network.tools.codec)):
            out[peer.uid] = flat(dense, names)
    return out


def update_sketch(update: Vector, bits: int) -> Vector:
    """The update's count sketch with the validator's own hashing (scoring/similarity.py), over its
    kept coordinates; one fixed hash for every window, as a validator comparing a peer's residuals
    across windows would keep (seeded here; secret there)."""
    kept = np.flatnonzero(update)
    rng = np.random.default_rng(SKETCH_SEED)  # the same multipliers on every call
    out: Vector = count_sketch(kept[None, :], update[kept][None, :], bits, rng).numpy()[0]
    return out


def heldout_gradient(runner: DemoRunner) -> Vector:
    """The gradient of the held-out loss on the demo's fixed pages at the current global model,
    flattened in parameter order. Updates are subtracted (θ ← θ − β·u), so an update that lowers
    the loss has a positive cosine with it."""
    model = runner.state.model.model
    model.zero_grad()
    tokens = sum(b[:, 1:].numel() for b in runner.eval_batches)
    for batch in runner.eval_batches:
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten(), reduction="sum")
        torch.autograd.backward(loss / tokens)
    grads = [torch.zeros_like(p) if p.grad is None else p.grad for _, p in model.named_parameters()]
    out: Vector = np.concatenate([g.flatten().double().numpy() for g in grads])
    model.zero_grad()
    return out


def residuals(updates: Mapping[int, Vector]) -> dict[int, Vector]:
    """Each update less its least-squares multiple of the other peers' mean."""
    out: dict[int, Vector] = {}
    total = sum(updates.values(), np.zeros_like(next(iter(updates.values()))))
    for uid, u in updates.items():
        consensus = (total - u) / (len(updates) - 1)
        scale = float(u @ consensus) / max(float(consensus @ consensus), 1e-30)
        out[uid] = u - scale * consensus
    return out


def run(
    peers: Sequence[Behaviour], windows: int, inner_steps: int, root: Path, corpus: Path,
    sketch_bits: int = SKETCH_BITS, skip: int = 0,
) -> list[dict[str, Any]]:  # fmt: skip
    root.mkdir(parents=True)
    (root / "corpus").symlink_to(corpus, target_is_directory=True)
    runner = DemoRunner(DemoConfig(peers, windows=windows, workdir=root, inner_steps=inner_steps))
    behaviour = {p.uid: p.behaviour.name for p in runner.network.peers}
    model = runner.state.model.model
    names = [n for n, _ in model.named_parameters()]
    # each peer against its own hidden direction (poison's, poison_strong's, the colluders' shared
    # one); peers without one against poison's
    seeds = {p.uid: int(getattr(p.behaviour, "seed", Poison().seed)) for p in runner.network.peers}
    hidden = {s: flat(model_direction(model, s), names) for s in set(seeds.values())}
    tracks = {uid: Track(name, skip) for uid, name in behaviour.items()}
    first = runner.next_window
    for window in range(first, first + windows):
        runner.publish(window)
        updates = published(runner, window)  # before validating: the model still at the window's base
        if len(updates) > 1:
            gradient = heldout_gradient(runner)
            for uid, r in residuals(updates).items():
                tracks[uid].add(r, updates[uid], hidden[seeds[uid]], gradient)
            sketches = {uid: update_sketch(u, sketch_bits) for uid, u in updates.items()}
            for uid, r in residuals(sketches).items():
                tracks[uid].sketched.append(r.astype(np.float32))
        runner.validate(window)
    return [{"uid": uid} | t.figures() for uid, t in sorted(tracks.items())]


def ranges(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        for key in ("persistence", "accumulation", "long_lag", "long_lag_sketch", "usefulness", "cos_hidden"):
            if row[key] is None:
                continue
            span = out.setdefault(row["behaviour"], {}).setdefault(key, [row[key], row[key]])
            span[0], span[1] = min(span[0], row[key]), max(span[1], row[key])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="3 windows, three peers, H = 2")
    parser.add_argument("--peers", default=PEERS)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=2, help="under N public seeds and secrets")
    parser.add_argument("--sketch-bits", type=int, default=SKETCH_BITS, help="log2 of the sketch's buckets")
    parser.add_argument(
        "--skip", type=int, default=0,
        help="long-lag pairs start at this window's residual (0-based; 2 leaves out the demo's warm-up, "
        "where nothing is aggregated and every residual is taken at the same base model)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec, windows, inner = ("honest:2,poison:1", 3, 2) if args.quick else (args.peers, args.windows, 20)
    try:
        peers = parse_peers(spec)
    except ValueError as e:
        parser.error(f"--peers: {e}")
    if windows < 2:
        parser.error("--windows: need at least 2 (persistence compares a window with earlier ones)")
    if not 8 <= args.sketch_bits <= 24:
        parser.error("--sketch-bits: between 8 and 24")
    if args.skip < 0 or args.skip > max(windows - 1 - LONG_LAG, 0):
        parser.error(f"--skip: between 0 and windows - 1 - {LONG_LAG} (no pair is left otherwise)")
    seeds = 1 if args.quick else max(args.seeds, 1)
    root = Path(tempfile.mkdtemp(prefix="gauntlet-residuals-"))
    corpus = root / "corpus"
    generate_corpus(corpus, seed=0, n_tokens=300_000 if args.quick else 1_500_000, shard_tokens=150_000)
    rows: list[dict[str, Any]] = []
    for k in range(seeds):
        seeded(k)
        for row in run(peers, windows, inner, root / f"run-{k}", corpus, args.sketch_bits, args.skip):
            rows.append({"seed": k} | row)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    figures = {"peers": spec, "windows": windows, "sketch_bits": args.sketch_bits, "skip": args.skip}
    figures["rows"] = rows
    print(json.dumps(figures | {"by_behaviour": ranges(rows)}))


if __name__ == "__main__":
    main()
