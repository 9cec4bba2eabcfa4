"""Content checks and dequantization of one parameter's packed tensors (DESIGN.md §5 item 5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scoring.encoder import dequantize
from scoring.packing import unpack2, unpack12
from scoring.types import Reason, SparseParam, Verdict
from scoring.wire import ChunkLayout, CodecConfig

U16 = npt.NDArray[np.uint16]


def _check_indices(idx: npt.NDArray[np.uint16], layout: ChunkLayout, chunk: int) -> Verdict | None:
    """Every index below its chunk's length and strictly increasing within its chunk."""
    body = idx[: layout.full_chunks * layout.k_full].reshape(layout.full_chunks, layout.k_full)
    tail = idx[layout.full_chunks * layout.k_full :]
    if body.size and int(body.max()) >= chunk:
        return Verdict.reject(Reason.INDEX_OUT_OF_RANGE, f"index {int(body.max())} ≥ chunk length {chunk}")
    if tail.size and int(tail.max()) >= layout.tail:
        return Verdict.reject(
            Reason.INDEX_OUT_OF_RANGE, f"index {int(tail.max())} ≥ last chunk's {layout.tail}"
        )
    if body.shape[1] > 1 and bool((np.diff(body.astype(np.int32), axis=1) <= 0).any()):
        return Verdict.reject(Reason.INDEX_NOT_INCREASING, "indices repeat or decrease within a chunk")
    if tail.size > 1 and bool((np.diff(tail.astype(np.int32)) <= 0).any()):
        return Verdict.reject(Reason.INDEX_NOT_INCREASING, "indices repeat or decrease in the last chunk")
    return None


def _check_codebook(
    scale: npt.NDArray[np.float16], lut: npt.NDArray[np.float32], cfg: CodecConfig
) -> Verdict | None:
    if not bool(np.isfinite(scale).all()):
        return Verdict.reject(Reason.NON_FINITE, "a chunk scale is NaN or infinite")
    if scale.size and (float(scale.min()) < 0.0 or float(scale.max()) > cfg.max_scale):
        return Verdict.reject(Reason.BAD_SCALE, f"scales must lie in [0, {cfg.max_scale}]")
    if not bool(np.isfinite(lut).all()):
        return Verdict.reject(Reason.NON_FINITE, "a codebook entry is NaN or infinite")
    if float(np.abs(lut).max()) > cfg.max_lut:
        return Verdict.reject(Reason.BAD_LUT, f"a codebook entry exceeds {cfg.max_lut} in magnitude")
    return None


def indices_v1(idx_bytes: npt.NDArray[np.generic], layout: ChunkLayout, cfg: CodecConfig) -> U16 | Verdict:
    """`gauntlet/1` indices: 12-bit fields, zero padding, each in range and increasing per chunk."""
    idx_all = unpack12(idx_bytes.astype(np.uint8, copy=False))
    if bool(idx_all[layout.kept :].any()):
        return Verdict.reject(Reason.BAD_PADDING, "padding after the last index is not zero")
    idx = idx_all[: layout.kept]
    return _check_indices(idx, layout, cfg.chunk) or idx


@dataclass(frozen=True, slots=True)
class PackedValues:
    """One parameter's value tensors as the file holds them (unchecked: a peer wrote them): 2-bit
    codes packed four to a byte, the per-chunk scales and the codebook."""

    codes: npt.NDArray[np.generic]
    scale: npt.NDArray[np.generic]
    lut: npt.NDArray[np.generic]

    @classmethod
    def of(cls, tensors: Mapping[str, npt.NDArray[np.generic]], name: str) -> PackedValues:
        return cls(tensors[f"{name}.val"], tensors[f"{name}.scale"], tensors[f"{name}.lut"])


def decode_param(
    shape: tuple[int, ...], layout: ChunkLayout, idx: U16, packed: PackedValues, cfg: CodecConfig
) -> SparseParam | Verdict:
    """Check and dequantize checked in-chunk indices with their 2-bit codes, scales and codebook."""
    codes_all = unpack2(packed.codes.astype(np.uint8, copy=False))
    if bool(codes_all[layout.kept :].any()):
        return Verdict.reject(Reason.BAD_PADDING, "padding after the last value code is not zero")
    scale16 = packed.scale.astype(np.float16, copy=False)
    lut32 = packed.lut.astype(np.float32, copy=False)
    problem = _check_codebook(scale16, lut32, cfg)
    if problem is not None:
        return problem
    indices, values = dequantize(layout, idx, codes_all[: layout.kept], scale16, lut32, cfg.chunk)
    return SparseParam(shape=shape, indices=indices, values=values)
