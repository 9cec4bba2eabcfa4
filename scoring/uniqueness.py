"""Uniqueness: exact duplicate payloads and copied updates across a window's peers (DESIGN.md §5.7).

Overlap of peers a and b is defined over *kept positions*: a position is a (flat coordinate, value
sign) pair, sign meaning `value > 0`. With K_a, K_b the kept counts (equal for valid peers, since the
schema fixes min(topk, chunk length) per chunk),

    overlap(a, b) = |{positions kept by both with the same sign}| / min(K_a, K_b).

Two independent random top-64-of-4096 selections share ~1/64 ≈ 1.6 % of coordinates, half of those
with the same sign: ≈ 0.8 %. Comparing every pair exactly is O(P² · K) (256 peers × 1.56 M positions
for 100 M parameters is far too slow), so the check runs in two stages:

1. sketch: a seeded sample of whole chunks (the same for every peer) gives each peer a small set of
   positions; each peer's sampled positions are hashed into a ±1 count sketch, and one (P, D) × (D, P)
   matmul estimates the shared positions of all pairs at once (unbiased);
2. exact: only pairs whose estimate reaches `halve_at − candidate_margin` are compared exactly, chunk
   by chunk (the kept arrays of valid peers share one slot layout).

Small parameters (a chunk shorter than topk keeps every position) are shared by everybody, so they
raise every pair's overlap by their share of kept positions with equal sign; in a real model that
share is tiny. Exact duplicate payloads (equal digests) are reported with overlap 1 and the top tier.

The seed should be unpredictable to peers (e.g. derived from the window's secret seed), so a copier
cannot concentrate copying outside the sampled chunks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt
import torch

from scoring.types import Reason, SparseParam

I64 = npt.NDArray[np.int64]


class CopyTier(IntEnum):
    """Penalty tier of a copier, ordered by severity (DESIGN.md §7)."""

    NONE = 0
    HALVE = 1
    RESET = 2
    BAN = 3


@dataclass(frozen=True, slots=True)
class UniquenessConfig:
    chunk: int = 4096
    topk: int = 64
    halve_at: float = 0.4
    reset_at: float = 0.5
    ban_at: float = 0.6
    # Sampling error depends on the number of blocks, not their size: 128 one-chunk blocks give
    # std ≤ 0.5/√128 ≈ 0.044 even for all-or-nothing copying per block, 4.5 std below the first
    # tier at the default margin; honest pairs estimate ≈ 0.01 ± 0.008 (sketch noise 1/√2^14).
    sample_blocks: int = 128
    block_chunks: int = 1
    sketch_bits: int = 14
    candidate_margin: float = 0.2

    def __post_init__(self) -> None:
        if self.chunk <= 0 or not 0 < self.topk <= self.chunk:
            raise ValueError("need 0 < topk <= chunk")
        if not 0.0 < self.halve_at <= self.reset_at <= self.ban_at <= 1.0:
            raise ValueError("need 0 < halve_at <= reset_at <= ban_at <= 1")
        if self.sample_blocks <= 0 or self.block_chunks <= 0:
            raise ValueError("sample_blocks and block_chunks must be positive")
        if not 8 <= self.sketch_bits <= 24:
            raise ValueError("sketch_bits must be in [8, 24]")
        if not 0.0 <= self.candidate_margin < self.halve_at:
            raise ValueError("need 0 <= candidate_margin < halve_at")

    def tier(self, overlap: float) -> CopyTier:
        if overlap >= self.ban_at:
            return CopyTier.BAN
        if overlap >= self.reset_at:
            return CopyTier.RESET
        if overlap >= self.halve_at:
            return CopyTier.HALVE
        return CopyTier.NONE


@dataclass(frozen=True, slots=True)
class PeerPayload:
    """One peer's valid submission as uniqueness sees it."""

    hotkey: str
    digest: str
    timestamp: float  # object-store timestamp, seconds
    update: Mapping[str, SparseParam]


@dataclass(frozen=True, slots=True)
class CopyFinding:
    """`offender` uploaded no earlier than `other` and overlaps it by `overlap`."""

    offender: str
    other: str
    overlap: float
    tier: CopyTier
    reason: str


def find_copies(
    peers: Sequence[PeerPayload], cfg: UniquenessConfig = UniquenessConfig(), seed: int = 0
) -> list[CopyFinding]:
    """All duplicate-payload and copy findings of a window, sorted by (offender, other)."""
    findings = _duplicate_findings(peers, cfg)
    dup_pairs = {frozenset((f.offender, f.other)) for f in findings}
    if len(peers) >= 2:
        estimates = _estimate_overlaps(peers, cfg, seed)
        threshold = cfg.halve_at - cfg.candidate_margin
        for i, j in zip(*np.nonzero(np.triu(estimates >= threshold, k=1)), strict=True):
            a, b = peers[int(i)], peers[int(j)]
            if a.digest == b.digest or frozenset((a.hotkey, b.hotkey)) in dup_pairs:
                continue
            overlap = exact_overlap(a.update, b.update, cfg)
            tier = cfg.tier(overlap)
            if tier is not CopyTier.NONE:
                findings.extend(_pair_findings(a, b, overlap, tier, Reason.COPY))
    return sorted(findings, key=lambda f: (f.offender, f.other))


def offender_tiers(findings: Sequence[CopyFinding]) -> dict[str, CopyTier]:
    """The most severe tier per offender."""
    tiers: dict[str, CopyTier] = {}
    for f in findings:
        tiers[f.offender] = max(tiers.get(f.offender, CopyTier.NONE), f.tier)
    return tiers


def exact_overlap(
    a: Mapping[str, SparseParam], b: Mapping[str, SparseParam], cfg: UniquenessConfig = UniquenessConfig()
) -> float:
    """Exact overlap of two valid updates (module docstring)."""
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


def _pair_findings(
    a: PeerPayload, b: PeerPayload, overlap: float, tier: CopyTier, reason: str
) -> list[CopyFinding]:
    # The later uploader is the offender; with equal timestamps nobody can tell, so both are.
    out = []
    if a.timestamp >= b.timestamp:
        out.append(CopyFinding(a.hotkey, b.hotkey, overlap, tier, reason))
    if b.timestamp >= a.timestamp:
        out.append(CopyFinding(b.hotkey, a.hotkey, overlap, tier, reason))
    return out


def _duplicate_findings(peers: Sequence[PeerPayload], cfg: UniquenessConfig) -> list[CopyFinding]:
    groups: dict[str, list[PeerPayload]] = {}
    for p in peers:
        groups.setdefault(p.digest, []).append(p)
    findings: list[CopyFinding] = []
    tier = cfg.tier(1.0)
    for group in groups.values():
        if len(group) < 2:
            continue
        ordered = sorted(group, key=lambda p: (p.timestamp, p.hotkey))
        first = ordered[0]
        for p in ordered[1:]:
            findings.append(CopyFinding(p.hotkey, first.hotkey, 1.0, tier, Reason.DUPLICATE_PAYLOAD))
        if ordered[1].timestamp == first.timestamp:
            # Nobody can tell who uploaded first: the earliest is an offender too.
            findings.append(CopyFinding(first.hotkey, ordered[1].hotkey, 1.0, tier, Reason.DUPLICATE_PAYLOAD))
    return findings


def _estimate_overlaps(
    peers: Sequence[PeerPayload], cfg: UniquenessConfig, seed: int
) -> npt.NDArray[np.float64]:
    """(P, P) overlap estimates: a count sketch of each peer's sampled keys, then one matmul.

    Each key adds ±1 to one of 2^sketch_bits buckets; the dot product of two sketches is the number
    of shared keys plus zero-mean collision noise with std ≈ sample / 2^(sketch_bits/2)."""
    rng = np.random.default_rng(seed)
    blocks = _sample_blocks(peers[0].update, cfg, rng)
    if not blocks:
        return np.zeros((len(peers), len(peers)))
    offsets = np.concatenate([np.full(stop - start, off, np.int64) for _, start, stop, off in blocks])
    names = sorted({b[0] for b in blocks})
    idx_parts: list[I64] = []
    val_parts: list[npt.NDArray[np.float32]] = []
    for p in peers:
        # One tensor-to-numpy view per parameter, then cheap numpy slices per block.
        idx_np = {n: p.update[n].indices.numpy() for n in names}
        val_np = {n: p.update[n].values.numpy() for n in names}
        idx_parts.extend(idx_np[n][a:z] for n, a, z, _ in blocks)
        val_parts.extend(val_np[n][a:z] for n, a, z, _ in blocks)
    idx, val = np.concatenate(idx_parts), np.concatenate(val_parts)
    n_peers, n_sample = len(peers), offsets.size
    keys = (idx.reshape(n_peers, n_sample) + offsets) * 2 + (val.reshape(n_peers, n_sample) > 0)
    mult = rng.integers(1, 2**62, size=2, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    hashed = keys.astype(np.uint64).ravel()
    bucket = (hashed * mult[0]) >> np.uint64(64 - cfg.sketch_bits)
    sign = ((hashed * mult[1]) >> np.uint64(63)).astype(np.float32) * 2 - 1
    rows = np.repeat(np.arange(n_peers, dtype=np.uint64), n_sample) << np.uint64(cfg.sketch_bits)
    sketch = torch.zeros(n_peers << cfg.sketch_bits, dtype=torch.float32)
    sketch.index_add_(0, torch.from_numpy((rows | bucket).astype(np.int64)), torch.from_numpy(sign))
    # Bucket sums are small integers, exact in bf16; bf16 rounds the products by < 0.4 %, plenty
    # for picking candidates, and halves the cost of the product.
    sk = sketch.view(n_peers, -1).to(torch.bfloat16)
    shared = (sk @ sk.T).to(torch.float64).numpy()
    return shared / max(n_sample, 1)


def _sample_blocks(
    update: Mapping[str, SparseParam], cfg: UniquenessConfig, rng: np.random.Generator
) -> list[tuple[str, int, int, int]]:
    """Seeded blocks of `block_chunks` consecutive chunks: (name, first slot, end slot, flat offset).

    Blocks are contiguous slices of every peer's kept arrays (full chunks keep `topk` slots each),
    drawn with probability proportional to their kept positions."""
    candidates: list[tuple[str, int, int, int]] = []
    offset = 0
    step = cfg.block_chunks * cfg.topk
    for name in sorted(update):
        kept = update[name].indices.numel()
        candidates.extend((name, a, min(a + step, kept), offset) for a in range(0, kept, step))
        offset += update[name].numel
    sizes = np.array([z - a for _, a, z, _ in candidates], dtype=np.float64)
    if not candidates:
        return []
    n = min(cfg.sample_blocks, len(candidates))
    chosen = np.sort(rng.choice(len(candidates), size=n, replace=False, p=sizes / sizes.sum()))
    return [candidates[int(i)] for i in chosen]
