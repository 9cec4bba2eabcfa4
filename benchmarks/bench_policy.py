"""Benchmark: uniqueness over many peers and aggregation of the selected ones on a ≥100M model.

    .venv/bin/python -m benchmarks.bench_policy [--quick]

Synthetic peers keep one random index per 64-wide stratum of every chunk (sorted, 1/64 density like
top-64-of-4096); three copiers are planted at overlaps 0.45 / 0.55 / 0.7 and must all be found.
The last line is a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping

import numpy as np
import torch

from scoring.aggregation import aggregate_into
from scoring.clipping import median_norms
from scoring.similarity import exact_overlap
from scoring.types import SparseParam
from scoring.uniqueness import CopyTier, PeerPayload, find_copies, offences
from tests.uniqueness_fixtures import copy_of

Update = dict[str, SparseParam]


def model_shapes(d: int, ff: int, vocab: int, layers: int) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"embed": (vocab, d), "norm": (d,)}
    for i in range(layers):
        shapes |= {f"l{i}.{n}": (d, d) for n in ("q", "k", "v", "o")}
        shapes |= {f"l{i}.gate": (ff, d), f"l{i}.up": (ff, d), f"l{i}.down": (d, ff)}
        shapes |= {f"l{i}.n1": (d,), f"l{i}.n2": (d,)}
    return shapes


def random_update(shapes: dict[str, tuple[int, ...]], rng: np.random.Generator, pool: torch.Tensor) -> Update:
    out = {}
    for name, shape in shapes.items():
        n = int(np.prod(shape))
        full = n // 4096
        idx = (np.arange(full)[:, None] * 4096 + np.arange(64) * 64 + rng.integers(0, 64, (full, 64))).ravel()
        if n > full * 4096:
            rest = n - full * 4096
            tail = full * 4096 + np.sort(rng.choice(rest, min(64, rest), replace=False))
            idx = np.concatenate((idx, tail))
        start = int(rng.integers(0, pool.numel() - idx.size))
        # Values are views into one shared random pool: real sign patterns without 1.6 GB of copies.
        out[name] = SparseParam(shape, torch.from_numpy(idx), pool[start : start + idx.size])
    return out


def bench_uniqueness(peers: list[PeerPayload], planted: dict[str, CopyTier]) -> dict[str, float]:
    find_copies(peers[:8], seed=99)  # warm-up: first-call allocations and matmul kernels
    times, found = [], {}
    for rep in range(3):
        t0 = time.perf_counter()
        found = {k: f.tier for k, f in offences(find_copies(peers, seed=rep)).items()}
        times.append(time.perf_counter() - t0)
        if found != planted:
            raise SystemExit(f"uniqueness missed or invented copies: {found} != {planted}")
    t0 = time.perf_counter()
    exact_overlap(peers[3].update, peers[4].update)
    pair_s = time.perf_counter() - t0
    n_pairs = len(peers) * (len(peers) - 1) // 2
    print(f"uniqueness: {len(peers)} peers, best {min(times):.3f} s, worst {max(times):.3f} s, 3/3 found")
    print(f"  one exact pair {pair_s * 1e3:.1f} ms; all {n_pairs} pairs exactly: ~{pair_s * n_pairs:.0f} s")
    return {
        "uniqueness_s": min(times),
        "uniqueness_worst_s": max(times),
        "exact_pair_s": pair_s,
        "speedup_vs_all_pairs_exact": pair_s * n_pairs / min(times),
    }


def bench_aggregation(
    shapes: dict[str, tuple[int, ...]], updates: list[Mapping[str, SparseParam]]
) -> dict[str, float]:
    params = {n: torch.zeros(s) for n, s in shapes.items()}
    reference = median_norms([{n: p.norm() for n, p in u.items()} for u in updates])
    t0 = time.perf_counter()
    aggregate_into(params, updates, reference, outer_lr=0.4)
    agg_s = time.perf_counter() - t0
    other = {n: torch.ones(s) for n, s in shapes.items()}
    t0 = time.perf_counter()
    for n, p in params.items():
        p.add_(other[n], alpha=-0.4)  # one dense axpy over the whole model, the unavoidable floor
    axpy_s = time.perf_counter() - t0
    peak_mb = max(int(np.prod(s)) for s in shapes.values()) * 4 / 2**20
    print(
        f"aggregation: {len(updates)} peers {agg_s:.3f} s = {agg_s / axpy_s:.1f}x one dense model axpy "
        f"({axpy_s:.3f} s); peak extra buffer {peak_mb:.0f} MiB (largest parameter)"
    )
    return {
        "aggregation_s": agg_s,
        "dense_axpy_s": axpy_s,
        "aggregation_vs_axpy": agg_s / axpy_s,
        "peak_buffer_mib": peak_mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small model, 32 peers, a few seconds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes = model_shapes(256, 688, 4096, 2) if args.quick else model_shapes(768, 2048, 32000, 12)
    n_peers = 32 if args.quick else 256
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    rng = np.random.default_rng(0)
    pool = torch.from_numpy(rng.standard_normal(4_000_000).astype(np.float32))
    t0 = time.perf_counter()
    updates = [random_update(shapes, rng, pool) for _ in range(n_peers - 3)]
    # the honest peers have proven training: only then does their first upload name a copier
    peers = [PeerPayload(f"hk{i:03d}", f"d{i}", 100.0 + i, u, proven=True) for i, u in enumerate(updates)]
    planted = {}
    for j, frac in enumerate((0.45, 0.55, 0.7)):
        copy = copy_of(updates[j], random_update(shapes, rng, pool), frac, rng)
        peers.append(PeerPayload(f"copy{frac}", f"c{j}", 1000.0 + j, copy))
        planted[f"copy{frac}"] = (CopyTier.HALVE, CopyTier.RESET, CopyTier.BAN)[j]
    print(
        f"model {n_params / 1e6:.1f}M params, {n_peers} peers generated in {time.perf_counter() - t0:.1f} s"
    )
    figures = {"params_m": n_params / 1e6, "peers": n_peers}
    figures |= bench_uniqueness(peers, planted)
    figures |= bench_aggregation(shapes, [p.update for p in peers[:20]])
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
