"""A small simulated subnet for LossScore tests: honest, lazy, noise and scaled peers over windows.

Sizes follow ../shared/MEASURED.md (d=128, 4 layers, seq 64, lr 2e-3, batch 8, β = 0.08 at outer
lr 1.0) at H = 10, with 8 assigned pages (all evaluated) and 16 held-out pages: with 16 assigned pages
at H = 10 honest peers proved training in only 75-100 % of windows across base seeds; with 8 it was
100 % for seeds 0-50 (lazy 40-65 %).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from scoring.clipping import median_norms
from scoring.data import Dataset, assigned_pages, batches, eval_sample, heldout_from_seed, window_seed
from scoring.loss_score import LossScoreConfig, PeerEval, PeerJob, evaluate_peers
from scoring.model import LlamaModel, ModelConfig, build_model
from scoring.train import InnerConfig, train_inner
from scoring.types import SparseParam

SEQ_LEN, PAGES, HELD, BATCH = 64, 8, 16, 8
CFG = LossScoreConfig(eval_lr_factor=0.08, outer_lr=1.0)
INNER = InnerConfig(steps=10, lr=2e-3)
HONEST, LAZY_UIDS, NOISE, SCALED = 1, tuple(range(2, 10)), 10, 11
OTHER = 99  # the uid whose pages the lazy peer trains on instead of its own


@dataclass
class Outcomes:
    honest: list[PeerEval] = field(default_factory=list)
    lazy: list[PeerEval] = field(default_factory=list)
    noise: list[PeerEval] = field(default_factory=list)
    scaled: list[PeerEval] = field(default_factory=list)

    @staticmethod
    def rate(evals: list[PeerEval]) -> float:
        return sum(e.indicator == 1 for e in evals) / len(evals)


def noise_like(update: dict[str, SparseParam], gen: torch.Generator) -> dict[str, SparseParam]:
    """Random values at the same coordinates with the same per-parameter norm."""
    out = {}
    for name, p in update.items():
        v = torch.randn(p.values.shape, generator=gen)
        out[name] = SparseParam(p.shape, p.indices, v * (p.values.norm() / v.norm().clamp_min(1e-12)))
    return out


def scaled(update: dict[str, SparseParam], factor: float) -> dict[str, SparseParam]:
    return {n: SparseParam(p.shape, p.indices, p.values * factor) for n, p in update.items()}


def run_window(model: LlamaModel, ds: Dataset, window: int, tag: str, out: Outcomes) -> None:
    """One window: an honest and a lazy peer train H steps; the lazy update is judged as 8 lazy uids."""
    pages = {u: assigned_pages(window, u, public_seed=tag, n_pages=PAGES, dataset=ds) for u in range(1, 12)}
    from scoring.encoder import compress_to_sparse  # here: the determinism subprocess skips its imports

    pages[OTHER] = assigned_pages(window, OTHER, public_seed=tag, n_pages=PAGES, dataset=ds)
    honest = compress_to_sparse(train_inner(model, batches(ds, pages[HONEST], BATCH), INNER), None)
    lazy = compress_to_sparse(train_inner(model, batches(ds, pages[OTHER], BATCH), INNER), None)
    noise = noise_like(honest, torch.Generator().manual_seed(window))
    big = scaled(honest, 1000.0)
    updates = {HONEST: honest, NOISE: noise, SCALED: big} | dict.fromkeys(LAZY_UIDS, lazy)
    reference = median_norms([{n: p.norm() for n, p in u.items()} for u in (honest, lazy, noise, big)])
    seed_hex = window_seed(tag.encode(), window)
    held = heldout_from_seed(seed_hex, n_pages=HELD, dataset=ds)
    jobs = []
    for uid, update in updates.items():
        sample = eval_sample(seed_hex, uid, assigned=pages[uid], k=PAGES)
        jobs.append(PeerJob(uid, update, partial(batches, ds, sample, BATCH)))
    results = {
        r.uid: r for r in evaluate_peers(model, jobs, batches(ds, held, BATCH), reference=reference, cfg=CFG)
    }
    out.honest.append(results[HONEST])
    out.lazy.extend(results[u] for u in LAZY_UIDS)
    out.noise.append(results[NOISE])
    out.scaled.append(results[SCALED])


def simulate(ds: Dataset, *, base_seed: int, seeds: int, windows: int) -> Outcomes:
    """`seeds` random-init models, each judged over `windows` windows of fresh page assignments."""
    out = Outcomes()
    for s in range(base_seed, base_seed + seeds):
        model = build_model(ModelConfig.tiny(), seed=s)
        for w in range(windows):
            run_window(model, ds, w, f"seed-{s}", out)
    return out


SMALL = ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=32)


def random_update(model: LlamaModel, seed: int, frac: float = 0.02) -> dict[str, SparseParam]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, p in model.named_parameters():
        k = max(1, int(p.numel() * frac))
        idx = torch.randperm(p.numel(), generator=gen)[:k].sort().values
        out[name] = SparseParam(tuple(p.shape), idx, torch.randn(k, generator=gen) * 0.05)
    return out


def token_batches(seed: int, n: int = 2) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 64, (4, 17), generator=gen) for _ in range(n)]


def determinism_losses() -> str:
    """The four losses of two random peers, as reprs: compared across processes bit for bit."""
    model = build_model(SMALL, seed=3)
    own, held = token_batches(5), token_batches(6)
    jobs = [PeerJob(u, random_update(model, u), partial(list, own)) for u in range(2)]
    results = evaluate_peers(model, jobs, held, reference={}, cfg=LossScoreConfig(1.0, 1.0))
    return "\n".join(
        repr((r.loss_own_before, r.loss_own_after, r.loss_rand_before, r.loss_rand_after)) for r in results
    )


def corpus_dataset(root: Path) -> Dataset:
    from scoring.corpus import generate_corpus

    generate_corpus(root, seed=0, n_tokens=400_000, shard_tokens=150_000)
    return Dataset.open(root, seq_len=SEQ_LEN)
