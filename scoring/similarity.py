"""Sketches that compare all pairs of a window's updates at once (DESIGN.md §5.7).

Both work on one seeded sample of whole chunks (the same for every peer), hashed into 2^sketch_bits
buckets with a ±1 sign, so one (P, D) × (D, P) matmul compares every pair:

- `estimate_overlaps`: shared kept *positions* (coordinate and value sign), unbiased, per kept count;
- `residual_similarity`: the cosine of two updates' *values* after each is stripped of the window's
  consensus direction (the mean of the other peers' unit updates). Honest peers trained on different
  data from the same base share that consensus and little else: their residuals are uncorrelated, or
  slightly negative, at any number of inner steps (measured at the demo's sizing: −0.18 to −0.05
  for H = 20, two quarter-trained peers +0.09). A copy keeps its victim's residual: +0.18 with noise
  at half each chunk's RMS added and re-sparsified (whose overlap, 0.32, looks like an honest pair's
  at the early stage of training), +0.40 for a blend of two peers, ≈ 1 for a copy with perturbed
  magnitudes. Colluders adding one hidden direction share it in their residuals too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from scoring.types import SparseParam

if TYPE_CHECKING:
    from scoring.uniqueness import UniquenessConfig

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Block = tuple[str, int, int, int]  # (parameter name, first kept slot, end slot, flat offset)


def sample_blocks(
    update: Mapping[str, SparseParam], cfg: UniquenessConfig, rng: np.random.Generator
) -> list[Block]:
    """Seeded blocks of `block_chunks` consecutive chunks, drawn with probability proportional to
    their kept positions. Blocks are contiguous slices of every peer's kept arrays (full chunks keep
    `topk` slots each, and valid peers share the layout)."""
    candidates: list[Block] = []
    offset = 0
    step = cfg.block_chunks * cfg.topk
    for name in sorted(update):
        param = update[name]  # once: on a spooled update each read decodes the whole parameter
        kept = param.indices.numel()
        candidates.extend((name, a, min(a + step, kept), offset) for a in range(0, kept, step))
        offset += param.numel
    sizes = np.array([z - a for _, a, z, _ in candidates], dtype=np.float64)
    if not candidates:
        return []
    n = min(cfg.sample_blocks, len(candidates))
    chosen = np.sort(rng.choice(len(candidates), size=n, replace=False, p=sizes / sizes.sum()))
    return [candidates[int(i)] for i in chosen]


def sampled(
    updates: Sequence[Mapping[str, SparseParam]], blocks: Sequence[Block]
) -> tuple[I64, npt.NDArray[np.float32]]:
    """(P, S) flat coordinates and values of every peer's kept slots in the sampled blocks.

    Filled row by row, one parameter of one peer at a time (a stored update decodes it on access),
    so no peer's whole parameter outlives its turn and nothing but the (P, S) result grows with P."""
    offsets = np.concatenate([np.full(stop - start, off, np.int64) for _, start, stop, off in blocks])
    ends = np.cumsum([stop - start for _, start, stop, _ in blocks])
    names = sorted({b[0] for b in blocks})
    idx = np.empty((len(updates), offsets.size), np.int64)
    val = np.empty((len(updates), offsets.size), np.float32)
    for row, u in enumerate(updates):
        for n in names:
            p = u[n]
            idx_np, val_np = p.indices.numpy(), p.values.numpy()
            for (name, a, z, _), end in zip(blocks, ends, strict=True):
                if name == n:
                    idx[row, end - (z - a) : end] = idx_np[a:z]
                    val[row, end - (z - a) : end] = val_np[a:z]
            del p, idx_np, val_np
    idx += offsets
    return idx, val


_SKETCH_ROWS = 16  # peers hashed at a time: the hashing's temporaries stay a few rows large


def count_sketch(
    keys: I64, weights: npt.NDArray[np.generic] | None, bits: int, rng: np.random.Generator
) -> torch.Tensor:
    """(P, 2^bits) float64 count sketch: each key adds ±weight (1 when None) to one bucket of its
    peer's row. `bincount` sums in input order, so the sketch is bit-for-bit reproducible (replay,
    restarts); each bucket belongs to one row, so hashing a few rows at a time sums the same terms in
    the same order as hashing all at once."""
    n_peers, n_sample = keys.shape
    mult = rng.integers(1, 2**62, size=2, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    out = np.empty((n_peers, 1 << bits), np.float64)
    for first in range(0, n_peers, _SKETCH_ROWS):
        rows = slice(first, min(first + _SKETCH_ROWS, n_peers))
        hashed = keys[rows].astype(np.uint64).ravel()
        bucket = (hashed * mult[0]) >> np.uint64(64 - bits)
        sign = ((hashed * mult[1]) >> np.uint64(63)).astype(np.float64) * 2 - 1
        if weights is not None:
            sign *= weights[rows].astype(np.float64).ravel()
        n = rows.stop - rows.start
        local = np.repeat(np.arange(n, dtype=np.uint64), n_sample) << np.uint64(bits)
        flat = (local | bucket).astype(np.int64)
        out[rows] = np.bincount(flat, weights=sign, minlength=n << bits).reshape(n, -1)
    return torch.from_numpy(out)


def estimate_overlaps(idx: I64, val: npt.NDArray[np.float32], bits: int, rng: np.random.Generator) -> F64:
    """(P, P) overlap estimates from the sampled positions (collision noise ≈ 1/2^(bits/2))."""
    keys = idx * 2
    keys += val > 0
    sk = count_sketch(keys, None, bits, rng)
    del keys
    # Bucket sums are small integers, exact in bf16; bf16 rounds the products by < 0.4 %, plenty
    # for picking candidates, and halves the cost of the product.
    sk16 = sk.to(torch.bfloat16)
    shared = (sk16 @ sk16.T).to(torch.float64).numpy()
    return np.asarray(shared / max(idx.shape[1], 1), dtype=np.float64)


def residual_similarity(
    idx: I64,
    val: npt.NDArray[np.float32],
    bits: int,
    rng: np.random.Generator,
    outside: npt.NDArray[np.bool_] | None = None,
    pairs_as_inside: bool = False,
) -> F64:
    """(P, P) cosine of the peers' residuals beyond the leave-one-out consensus (module docstring);
    rows marked `outside` are compared but left out of every consensus. A pair of one row inside and
    one outside is read as two peers inside are (`mixed_pairs`). With `pairs_as_inside` a pair of
    outside rows is too (`as_inside_pairs`): the links across windows read so. The copy findings do
    not: between two peers that have not proven training a copy read 0.13-0.23 lower so, and at 30 %
    of the slots copied one was missed (a review's reproducer), while honest pairs outside read +0.08
    on the demo's updates, under the copy floor (0.1)."""
    unit = count_sketch(idx, val, bits, rng)
    unit /= torch.linalg.vector_norm(unit, dim=1, keepdim=True).clamp_min(1e-30)
    # Each peer counts in the consensus by how much it agrees with the plain mean: unrelated updates
    # (noise, junk) weigh ~0, so they cannot blur the honest consensus whose removal decorrelates
    # honest residuals (with 12 of 25 junk peers honest pairs kept +0.04…+0.08 without this)
    left_out = None if outside is None else torch.from_numpy(outside)
    # the mean that weighs the consensus leaves them out too: a crowd of them set its direction
    mean = unit.sum(0) if left_out is None or bool(left_out.all()) else unit[~left_out].sum(0)
    weight = (unit @ (mean / torch.linalg.vector_norm(mean).clamp_min(1e-30))).clamp_min(0.0)
    pairs_out = None  # the outside rows whose pairs are read as inside pairs: two or more of them
    if pairs_as_inside and left_out is not None and 2 <= int(left_out.sum()) < len(left_out):
        pairs_out = torch.nonzero(left_out).flatten()
    kept = None if pairs_out is None else (unit[pairs_out].clone(), weight[pairs_out].clone())
    # an outside row's weight had it been inside, against the mean with its own update in it (`mixed_pairs`):
    # an inside row's weight holds its own share of the mean, and without one an unproven partner
    # weighed too little (honest pairs across the split still read +0.06 over the same pairs inside)
    outside_weight = None
    if left_out is not None and 0 < int(left_out.sum()) < len(left_out):
        along = unit @ mean
        joined = (mean @ mean + 2.0 * along + 1.0).clamp_min(1e-60).sqrt()
        outside_weight = torch.where(left_out, ((along + 1.0) / joined).clamp_min(0.0), weight)
    if left_out is not None:
        weight[left_out] = 0.0
    # (P, D) matrices are the window's one per-peer cost here: each step works in place (the same
    # arithmetic: total − w is total + (−w) exactly), so at most three are alive at once
    others = weight[:, None] * unit
    total = others.sum(0, keepdim=True)
    outside_pairs = None if kept is None else as_inside_pairs(*kept, total[0])
    mixed = None
    if outside_weight is not None and left_out is not None:  # (the second for the type checker)
        inside = torch.nonzero(~left_out).flatten()
        out = torch.nonzero(left_out).flatten()
        mixed = (inside, out, mixed_pairs(unit, outside_weight, total[0], inside, out))
    others.neg_().add_(total)  # each peer's consensus leaves it out
    others /= torch.linalg.vector_norm(others, dim=1, keepdim=True).clamp_min(1e-30)
    others *= (unit * others).sum(1, keepdim=True)
    resid = unit.sub_(others)
    del others
    resid /= torch.linalg.vector_norm(resid, dim=1, keepdim=True).clamp_min(1e-30)
    # Rounded: the last bits of float64 reductions depend on the thread count, and a stored figure or
    # a threshold decision must not (replay and restarts compare them exactly)
    gram: F64 = np.asarray((resid @ resid.T).numpy(), dtype=np.float64)
    if outside_pairs is not None and pairs_out is not None:
        rows = pairs_out.numpy()
        gram[np.ix_(rows, rows)] = outside_pairs.numpy()
    if mixed is not None:
        inside_rows, outside_rows, block = mixed[0].numpy(), mixed[1].numpy(), mixed[2].numpy()
        gram[np.ix_(inside_rows, outside_rows)] = block
        gram[np.ix_(outside_rows, inside_rows)] = block.T
    return np.round(gram, 9)


def mixed_pairs(
    unit: torch.Tensor, weight: torch.Tensor, total: torch.Tensor, inside: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """(n_inside, n_outside) residual cosines of each pair of a row inside the consensus and one
    outside it, read as two peers inside are: the inside peer i against its own consensus plus its
    partner j (`total` − w_i u_i + w_j u_j, w_j the weight j would have inside), j against `total`,
    which holds i already. Closed form from dot products, as `as_inside_pairs`. Read plainly, i's
    consensus left j's update out while j's held i's: an honest pair of a proven and an unproven peer
    read +0.19 over the same pair with both proven (`tests/test_mixed_pairs.py`), and in
    `bench_fidelity`'s `weak_half` and mixed under seed 1 two full honest peers, one in its warm-up,
    read 0.153 and 0.114 in window 4, over the copy floor (0.1): an unclear copy finding, and one of
    the two was left out of the window's aggregate."""
    # from the (P, P) Gram matrix and (P,) projections: indexing `unit` by rows would copy a (P, D)
    # matrix, the window's one per-peer cost here (`residual_similarity`)
    gram = (unit @ unit.T)[inside][:, out]
    along = unit @ total
    w_in, w_out = weight[inside][:, None], weight[out][None, :]
    t_in, t_out, tt = along[inside][:, None], along[out][None, :], total @ total
    # i's consensus with j: a = total − w_i u_i + w_j u_j; j's is total
    norm_a = (
        tt + w_in * w_in + w_out * w_out - 2.0 * w_in * t_in + 2.0 * w_out * t_out - 2.0 * w_in * w_out * gram
    )
    norm_a = norm_a.clamp_min(1e-60).sqrt()
    norm_t = tt.clamp_min(1e-60).sqrt()
    ui_a = (t_in - w_in + w_out * gram) / norm_a
    uj_a = (t_out - w_in * gram + w_out) / norm_a
    ui_t, uj_t = t_in / norm_t, t_out / norm_t
    at = (tt - w_in * t_in + w_out * t_out) / (norm_a * norm_t)
    return _pair_cosine(gram, ui_a, uj_a, ui_t, uj_t, at).clamp_(-1.0, 1.0)


def _pair_cosine(
    gram: torch.Tensor,
    ui_a: torch.Tensor,
    uj_a: torch.Tensor,
    ui_b: torch.Tensor,
    uj_b: torch.Tensor,
    ab: torch.Tensor,
) -> torch.Tensor:
    """The cosine of r_i = u_i − (u_i·â)â and r_j = u_j − (u_j·b̂)b̂ from dot products alone: `gram`
    u_i·u_j, the unit updates' projections on i's consensus â and j's consensus b̂, and `ab` â·b̂."""
    dot = gram - uj_b * ui_b - ui_a * uj_a + ui_a * uj_b * ab
    left_i, left_j = 1.0 - ui_a * ui_a, 1.0 - uj_b * uj_b  # each residual's squared norm
    # a peer (nearly) equal to its consensus has no residual: 0, as the explicit form's zero vector
    # reads; the clamp alone made rounding noise at 1e-8 from it read 760288 (a review's reproducer)
    empty = (left_i < 1e-12) | (left_j < 1e-12)
    return torch.where(empty, 0.0, dot / (left_i.clamp_min(1e-12) * left_j.clamp_min(1e-12)).sqrt())


def as_inside_pairs(unit: torch.Tensor, weight: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """(m, m) residual cosines of peers left out of the consensus, each pair read as two peers in it
    are: each against the consensus `total` plus its partner (at its `weight`), closed form from the
    Gram matrix. Read against `total` alone, two outside peers share what the consensus, estimated
    from a few updates, misses of the common direction: honest pairs outside read +0.08 ± 0.02 (ten
    honest demo peers, eight inside; inside pairs −0.08), every one above the links' reference, so
    a linked honest peer stayed linked for good and linked with every other peer outside."""
    gram, t, tt = unit @ unit.T, unit @ total, total @ total
    norm = (tt + 2.0 * weight * t + weight * weight).clamp_min(1e-60).sqrt()  # ‖total + w_j u_j‖ by j
    ui_a = (t[:, None] + weight[None, :] * gram) / norm[None, :]  # u_i · (i's consensus, with j)
    uj_a = ((t + weight) / norm)[None, :]  # u_j · (i's consensus, with j)
    uj_b = (t[None, :] + weight[:, None] * gram) / norm[:, None]  # u_j · (j's consensus, with i)
    ui_b = ((t + weight) / norm)[:, None]  # u_i · (j's consensus, with i)
    ab = (tt + (weight * t)[:, None] + (weight * t)[None, :] + weight[:, None] * weight[None, :] * gram) / (
        norm[:, None] * norm[None, :]
    )
    out = _pair_cosine(gram, ui_a, uj_a, ui_b, uj_b, ab)
    out = (out + out.T) / 2.0  # equal in exact arithmetic; the two orders of the sums differ in the last bit
    out.clamp_(-1.0, 1.0)
    out.fill_diagonal_(1.0)
    return out


def exact_overlap(
    a: Mapping[str, SparseParam], b: Mapping[str, SparseParam], cfg: UniquenessConfig | None = None
) -> float:
    """Exact overlap of two valid updates (scoring/uniqueness.py)."""
    if cfg is None:
        from scoring.uniqueness import UniquenessConfig  # the config's module imports this one

        cfg = UniquenessConfig()
    shared = kept_a = kept_b = 0
    for name in sorted(a):
        ka, kb = _position_keys(a[name]), _position_keys(b[name])
        kept_a, kept_b = kept_a + ka.size, kept_b + kb.size
        shared += _shared_keys(ka, kb, cfg)
    kept = min(kept_a, kept_b)
    return shared / kept if kept else 0.0


def _position_keys(p: SparseParam) -> I64:
    # index * 2 + sign keeps the order of strictly increasing indices, so the keys stay sorted.
    return p.indices.numpy() * 2 + (p.values.numpy() > 0)


def _shared_keys(ka: I64, kb: I64, cfg: UniquenessConfig) -> int:
    """Keys in both sorted arrays. Both have one block of `topk` slots per full chunk, so compare
    chunk by chunk: sort each chunk's 2·topk local keys and count equal neighbours."""
    if ka.size != kb.size:
        at = np.minimum(np.searchsorted(ka, kb), max(ka.size - 1, 0))
        return int(np.count_nonzero(ka[at] == kb)) if ka.size else 0
    rows = ka.size // cfg.topk
    full = rows * cfg.topk
    base = np.arange(rows, dtype=np.int64)[:, None] * (2 * cfg.chunk)
    local_type = np.int16 if 2 * cfg.chunk <= np.iinfo(np.int16).max else np.int32
    la = (ka[:full].reshape(rows, cfg.topk) - base).astype(local_type)
    lb = (kb[:full].reshape(rows, cfg.topk) - base).astype(local_type)
    merged = np.sort(np.concatenate((la, lb), axis=1), axis=1)
    count = int(np.count_nonzero(merged[:, 1:] == merged[:, :-1]))
    return count + int(np.intersect1d(ka[full:], kb[full:], assume_unique=True).size)
