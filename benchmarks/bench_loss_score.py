"""LossScore cost per peer against its four bare forward passes (DESIGN.md §11).

Measured in one run on the same batches and the same codec-shaped sparse updates:
- bare: the four forward passes alone (own before, own after and held-out after at β, held-out at
  the probe step) on an unchanged model;
- sparse: the full evaluation (one pass, clip, in-place sparse apply at β, two passes, exact
  restore, apply at the probe step, one pass, exact restore);
- naive: clone the whole model's parameters, one pass, apply the dense update at β, two passes,
  re-apply it at the probe step, one pass, load the clone back.
Ratios are medians over repetitions, each ratio against bare passes timed next to it.

    .venv/bin/python benchmarks/bench_loss_score.py [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

import torch

from scoring.clipping import clip_factors, median_norms
from scoring.encoder import compress_to_sparse
from scoring.loss_score import (
    Baseline,
    LossScoreConfig,
    PeerJob,
    apply_sparse,
    evaluate_peer,
    mean_loss,
    restore,
)
from scoring.model import LlamaModel, ModelConfig, build_model, count_parameters
from scoring.types import SparseParam

CFG = LossScoreConfig()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_update(model: LlamaModel, seed: int) -> dict[str, SparseParam]:
    """A codec-shaped update (top 64 of each 4096-chunk, 2-bit values) of a random dense delta."""
    gen = torch.Generator().manual_seed(seed)
    delta = {n: torch.randn(p.shape, generator=gen) * 1e-3 for n, p in model.named_parameters()}
    return compress_to_sparse(delta, None)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bare(model: LlamaModel, own: list[torch.Tensor], held: list[torch.Tensor]) -> None:
    mean_loss(model, own)
    mean_loss(model, own)
    mean_loss(model, held)
    mean_loss(model, held)


def naive(
    model: LlamaModel,
    update: Mapping[str, SparseParam],
    reference: Mapping[str, float],
    own: list[torch.Tensor],
    held: list[torch.Tensor],
) -> None:
    """What the sparse path avoids: a full parameter copy and dense updates per peer."""
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    mean_loss(model, own)
    factors = clip_factors(update, reference)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.sub_(update[name].dense(), alpha=CFG.beta * factors[name])
    mean_loss(model, own)
    mean_loss(model, held)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(saved[name]).sub_(update[name].dense(), alpha=CFG.beta * CFG.probe_factor * factors[name])
    mean_loss(model, held)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(saved[name])


def model_config(quick: bool) -> ModelConfig:
    if quick:
        return ModelConfig.tiny()
    return ModelConfig(vocab_size=8192, dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1376)


@dataclass(frozen=True)
class Setup:
    model: LlamaModel
    own: list[torch.Tensor]
    held: list[torch.Tensor]
    updates: list[dict[str, SparseParam]]
    reference: dict[str, float]
    reps: int


def build_setup(quick: bool) -> Setup:
    cfg = model_config(quick)
    peers, reps, pages, seq = (2, 2, 4, 64) if quick else (3, 3, 4, 128)
    model = build_model(cfg, seed=0)
    gen = torch.Generator().manual_seed(1)
    own = [torch.randint(0, cfg.vocab_size, (pages, seq + 1), generator=gen)]
    held = [torch.randint(0, cfg.vocab_size, (pages, seq + 1), generator=gen)]
    updates = [make_update(model, 100 + i) for i in range(peers)]
    reference = median_norms([{n: p.norm() for n, p in u.items()} for u in updates])
    kept = sum(p.indices.numel() for p in updates[0].values())
    print(f"model: {count_parameters(model) / 1e6:.1f}M parameters; {kept} kept coordinates per update")
    print(f"batches: own {pages}×{seq}, held-out {pages}×{seq}; {peers} peers × {reps} repetitions")
    return Setup(model, own, held, updates, reference, reps)


@dataclass
class Samples:
    bare: list[float] = field(default_factory=list)
    sparse: list[float] = field(default_factory=list)
    naive: list[float] = field(default_factory=list)
    apply_restore: list[float] = field(default_factory=list)
    within: list[float] = field(default_factory=list)  # one evaluation's total / its own four passes


def measure(st: Setup) -> Samples:
    """Bare, sparse and naive per peer, interleaved so background load hits all three alike."""
    base = Baseline(st.held, mean_loss(st.model, st.held), st.reference, CFG)
    out = Samples()
    for _ in range(st.reps):
        for i, update in enumerate(st.updates):
            job = PeerJob(i, update, lambda: st.own)
            out.bare.append(timed(partial(bare, st.model, st.own, st.held)))
            t = time.perf_counter()
            result = evaluate_peer(st.model, job, st.own, base)
            out.sparse.append(time.perf_counter() - t)
            out.apply_restore.append(result.timings.apply_s + result.timings.restore_s)
            out.within.append(result.timings.total_s / result.timings.forward_s)
            out.naive.append(timed(partial(naive, st.model, update, st.reference, st.own, st.held)))
    return out


def held_bytes(st: Setup) -> tuple[int, int]:
    """Bytes kept per peer while it is evaluated: saved coordinates (sparse) vs a parameter clone."""
    saved = apply_sparse(st.model, st.updates[0], clip_factors(st.updates[0], st.reference), CFG.beta)
    sparse = sum(t.nbytes for t in (*saved.indices, *saved.values))
    restore(saved)
    return sparse, sum(p.numel() * p.element_size() for p in st.model.parameters())


def ratios(num: list[float], den: list[float]) -> tuple[float, float]:
    """(min over min, median of pairwise ratios): the first is the robust one on a shared machine."""
    return min(num) / min(den), statistics.median(n / d for n, d in zip(num, den, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, few repetitions (CI smoke run)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    print(f"device: cpu, {args.threads} thread(s); CUDA available: {torch.cuda.is_available()} (no GPU run)")
    st = build_setup(args.quick)
    rss_start = peak_rss_mib()
    warm = evaluate_peer(
        st.model,
        PeerJob(0, st.updates[0], lambda: st.own),
        st.own,
        Baseline(st.held, 1.0, st.reference, CFG),
    )
    del warm
    rss_sparse = peak_rss_mib()
    sm = measure(st)
    rss_naive = peak_rss_mib()
    sparse_bytes, clone_bytes = held_bytes(st)
    sparse_min, sparse_med = ratios(sm.sparse, sm.bare)
    naive_min, naive_med = ratios(sm.naive, sm.bare)
    figures = {
        "params": count_parameters(st.model),
        "bare_four_passes_s": min(sm.bare),
        "sparse_eval_s": min(sm.sparse),
        "naive_eval_s": min(sm.naive),
        "sparse_ratio": sparse_min,
        "naive_ratio": naive_min,
        "sparse_ratio_median": sparse_med,
        "naive_ratio_median": naive_med,
        "apply_restore_s": statistics.median(sm.apply_restore),
        "sparse_ratio_within_call": statistics.median(sm.within),
        "rss_mib_before_eval": rss_start,
        "peak_rss_mib_sparse": rss_sparse,
        "peak_rss_mib_naive": rss_naive,
        "held_bytes_per_peer_sparse": sparse_bytes,
        "held_bytes_per_peer_naive": clone_bytes,
        "gpu": False,
    }
    print(f"bare four passes: {figures['bare_four_passes_s'] * 1e3:.1f} ms per peer (best)")
    print(f"sparse evaluation: ratio {sparse_min:.3f} (median of pairs {sparse_med:.3f})")
    print(f"  of which clip + apply + restore: {figures['apply_restore_s'] * 1e3:.1f} ms")
    print(f"  within one call (total / its four passes): {figures['sparse_ratio_within_call']:.4f}")
    print(f"naive clone+dense: ratio {naive_min:.3f} (median of pairs {naive_med:.3f})")
    print(f"peak RSS MiB: {rss_start:.0f} before, {rss_sparse:.0f} after sparse, {rss_naive:.0f} after naive")
    print(f"held per peer: {sparse_bytes / 2**20:.2f} MiB (sparse) vs {clone_bytes / 2**20:.1f} MiB (clone)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
