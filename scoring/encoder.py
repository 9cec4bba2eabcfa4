"""The peer side of SparseLoCo: error feedback, chunk top-k, 2-bit quantization, signed container.

Used by simulated peers and by miners who import the package. Everything is vectorized over chunks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from safetensors.numpy import save

from scoring.packing import pack2, pack12
from scoring.rice import encode_indices
from scoring.signing import Signer, sign_hex
from scoring.types import SparseParam
from scoring.wire import (
    FORMAT,
    FORMAT_V2,
    FORMATS,
    ChunkLayout,
    CodecConfig,
    canonical_tensors,
    numel_of,
    payload_digest,
    signed_message,
)


@dataclass(frozen=True, slots=True)
class CompressedParam:
    """One parameter after compression, before bit packing."""

    shape: tuple[int, ...]
    idx: npt.NDArray[np.uint16]  # (K,) index within its chunk, strictly increasing per chunk
    codes: npt.NDArray[np.uint8]  # (K,) 2-bit codebook entries
    scale: npt.NDArray[np.float16]  # (chunks,)
    lut: npt.NDArray[np.float32]  # (4,)


def dequantize(
    layout: ChunkLayout,
    idx: npt.NDArray[np.uint16],
    codes: npt.NDArray[np.uint8],
    scale: npt.NDArray[np.float16],
    lut: npt.NDArray[np.float32],
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat int64 coordinates and float32 values `lut[q] * s_c`; shared by encoder and decoder."""
    counts = np.full(layout.chunks, layout.k_full, dtype=np.int64)
    if layout.tail:
        counts[-1] = layout.k_tail
    chunk_of = np.repeat(np.arange(layout.chunks, dtype=np.int64), counts)
    flat = chunk_of * chunk + idx.astype(np.int64)
    values = lut[codes] * scale.astype(np.float32)[chunk_of]
    return torch.from_numpy(flat), torch.from_numpy(values.astype(np.float32, copy=False))


def to_sparse(p: CompressedParam, cfg: CodecConfig) -> SparseParam:
    layout = ChunkLayout.of(int(np.prod(p.shape, dtype=np.int64)), cfg)
    indices, values = dequantize(layout, p.idx, p.codes, p.scale, p.lut, cfg.chunk)
    return SparseParam(shape=p.shape, indices=indices, values=values)


def _topk_rows(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (chunk) the k largest magnitudes: sorted positions (C, k) and their signed values."""
    pos = torch.topk(rows.abs(), k, dim=1, sorted=False).indices
    pos = pos.sort(dim=1).values
    return pos, rows.gather(1, pos)


def _select(flat: torch.Tensor, layout: ChunkLayout, cfg: CodecConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Kept in-chunk positions and values, chunk after chunk, as flat (K,) tensors."""
    pos_parts, val_parts = [], []
    if layout.full_chunks:
        body = flat[: layout.full_chunks * cfg.chunk].view(layout.full_chunks, cfg.chunk)
        p, v = _topk_rows(body, layout.k_full)
        pos_parts.append(p.reshape(-1))
        val_parts.append(v.reshape(-1))
    if layout.tail:
        p, v = _topk_rows(flat[layout.full_chunks * cfg.chunk :].view(1, layout.tail), layout.k_tail)
        pos_parts.append(p.reshape(-1))
        val_parts.append(v.reshape(-1))
    return torch.cat(pos_parts), torch.cat(val_parts)


def _quantize(
    values: npt.NDArray[np.float32], chunk_of: npt.NDArray[np.int64], chunks: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float16], npt.NDArray[np.float32]]:
    """2-bit codes, per-chunk relative scales in [0, 1] (fp16) and a symmetric 4-entry codebook.

    The scale carries each chunk's magnitude relative to the tensor's largest chunk, so fp16 keeps
    its precision whatever the absolute size of the update; the codebook carries absolute values.
    """
    mag = np.abs(values)
    chunk_max = np.zeros(chunks, dtype=np.float32)
    np.maximum.at(chunk_max, chunk_of, mag)
    top = float(chunk_max.max()) if chunks else 0.0
    if top == 0.0 or not np.isfinite(top):
        return np.zeros(values.size, np.uint8), np.zeros(chunks, np.float16), np.zeros(4, np.float32)
    scale = (chunk_max / np.float32(top)).astype(np.float16)
    s = scale.astype(np.float32)[chunk_of]
    u = np.divide(mag, s, out=np.zeros_like(mag), where=s > 0)  # |value| in codebook units
    mid = float(np.median(u))
    low, high = u[u <= mid], u[u > mid]
    lo = np.float32(low.mean()) if low.size else np.float32(mid)
    hi = np.float32(high.mean()) if high.size else lo
    big = (u > (lo + hi) / 2).astype(np.uint8)
    codes = np.where(values < 0, 1 - big, 2 + big).astype(np.uint8)
    lut = np.array([-hi, -lo, lo, hi], dtype=np.float32)
    return codes, scale, lut


def compress_param(e: torch.Tensor, cfg: CodecConfig) -> CompressedParam:
    """Compress one error-feedback buffer (any shape, float32) into its kept, quantized entries."""
    flat = e.detach().reshape(-1).to(torch.float32)
    layout = ChunkLayout.of(flat.numel(), cfg)
    if layout.numel == 0:
        empty_u16, empty_u8 = np.zeros(0, np.uint16), np.zeros(0, np.uint8)
        return CompressedParam(
            tuple(e.shape), empty_u16, empty_u8, np.zeros(0, np.float16), np.zeros(4, np.float32)
        )
    pos, vals = _select(flat, layout, cfg)
    counts = np.full(layout.chunks, layout.k_full, dtype=np.int64)
    if layout.tail:
        counts[-1] = layout.k_tail
    chunk_of = np.repeat(np.arange(layout.chunks, dtype=np.int64), counts)
    codes, scale, lut = _quantize(vals.numpy(), chunk_of, layout.chunks)
    return CompressedParam(tuple(e.shape), pos.numpy().astype(np.uint16), codes, scale, lut)


def compress(
    delta: Mapping[str, torch.Tensor], error_feedback: dict[str, torch.Tensor] | None, cfg: CodecConfig
) -> dict[str, CompressedParam]:
    """e ← β·e + Δ, keep the top-k per chunk, quantize, and subtract what was sent from e.

    With `error_feedback` None the delta is compressed directly (no memory across windows).
    """
    out: dict[str, CompressedParam] = {}
    for name, d in delta.items():
        if error_feedback is None:
            e = d.detach().to(torch.float32).clone()
        else:
            prev = error_feedback.get(name)
            e = (
                d.detach().to(torch.float32).clone()
                if prev is None
                else prev.mul_(cfg.error_feedback).add_(d)
            )
            error_feedback[name] = e
        c = compress_param(e, cfg)
        sent = to_sparse(c, cfg)
        e.view(-1).index_add_(0, sent.indices, sent.values, alpha=-1.0)
        out[name] = c
    return out


def compress_to_sparse(
    delta: Mapping[str, torch.Tensor],
    error_feedback: dict[str, torch.Tensor] | None,
    cfg: CodecConfig | None = None,
) -> dict[str, SparseParam]:
    """What a validator would decode from this peer's submission, without the container."""
    cfg = cfg or CodecConfig()
    return {name: to_sparse(c, cfg) for name, c in compress(delta, error_feedback, cfg).items()}


def pack_tensors(
    compressed: Mapping[str, CompressedParam], cfg: CodecConfig | None = None, fmt: str = FORMAT
) -> dict[str, npt.NDArray[np.generic]]:
    """The tensors of a file; only `NAME.idx` differs between the formats (docs/wire-format.md)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    cfg = cfg or CodecConfig()
    tensors: dict[str, npt.NDArray[np.generic]] = {}
    for name, c in compressed.items():
        layout = ChunkLayout.of(numel_of(c.shape), cfg)
        tensors[f"{name}.idx"] = pack12(c.idx) if fmt == FORMAT else encode_indices(c.idx, layout)
        tensors[f"{name}.val"] = pack2(c.codes)
        tensors[f"{name}.scale"] = c.scale
        tensors[f"{name}.lut"] = c.lut
    return tensors


def encode_submission(
    compressed: Mapping[str, CompressedParam],
    *,
    window: int,
    uid: int,
    base: str,
    signer: Signer,
    cfg: CodecConfig,
    fmt: str = FORMAT_V2,
) -> bytes:
    """A signed safetensors file for one window, `gauntlet/2` unless `fmt` asks for `gauntlet/1`."""
    tensors = pack_tensors(compressed, cfg, fmt)
    # the digest names the update, not its encoding: always over the `gauntlet/1` tensors (§7)
    positions = {name: c.idx for name, c in compressed.items()} if fmt == FORMAT_V2 else {}
    digest = payload_digest(canonical_tensors(tensors, positions))
    return signed_file(tensors, digest, signer, window=window, uid=uid, base=base, cfg=cfg, fmt=fmt)


def signed_file(
    tensors: Mapping[str, np.ndarray],
    digest: str,
    signer: Signer,
    *,
    window: int,
    uid: int,
    base: str,
    cfg: CodecConfig,
    fmt: str,
) -> bytes:
    """`tensors` as a submission file: the signed metadata of DESIGN §4 over `digest`. The one place
    that writes it; tools that re-sign someone's tensors (the sim's copiers, test fixtures) call it."""
    hotkey = signer.ss58_address
    metadata = {
        "format": fmt,
        "window": str(window),
        "uid": str(uid),
        "hotkey": hotkey,
        "base": base,
        "chunk": str(cfg.chunk),
        "topk": str(cfg.topk),
        "signature": sign_hex(signer, signed_message(window, uid, hotkey, base, digest, fmt)),
    }
    return save(dict(tensors), metadata=metadata)
