"""Bit packing of the wire format (DESIGN.md §4.2): 12-bit indices and 2-bit value codes.

Pure numpy, vectorized over the whole tensor; no Python loop over entries or chunks.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
U16 = npt.NDArray[np.uint16]


def packed12_len(count: int) -> int:
    """Bytes taken by `count` 12-bit numbers (an odd count is padded with one zero)."""
    return (count + 1) // 2 * 3


def packed2_len(count: int) -> int:
    """Bytes taken by `count` 2-bit codes (padded to a multiple of four)."""
    return (count + 3) // 4


def pack12(values: npt.NDArray[np.integer]) -> U8:
    """Pack numbers < 4096 two into three bytes: a&0xFF, (a>>8)|((b&0xF)<<4), b>>4."""
    v = np.ascontiguousarray(values, dtype="<u2").reshape(-1)
    if v.size % 2:
        v = np.concatenate([v, np.zeros(1, dtype="<u2")])
    # byte-wise on (a_lo, a_hi, b_lo, b_hi): twice as fast as 16-bit arithmetic, and the decoder
    # packs every `gauntlet/2` update this way for its digest
    u = v.view(np.uint8).reshape(-1, 4)
    out = np.empty((u.shape[0], 3), dtype=np.uint8)
    out[:, 0] = u[:, 0]
    np.bitwise_or(u[:, 1], u[:, 2] << 4, out=out[:, 1])
    np.bitwise_or(u[:, 2] >> 4, u[:, 3] << 4, out=out[:, 2])
    return out.reshape(-1)


def unpack12(buf: U8) -> U16:
    """Inverse of pack12; returns the padded count (a multiple of two)."""
    t = buf.reshape(-1, 3).astype(np.uint16)
    out = np.empty((t.shape[0], 2), dtype=np.uint16)
    out[:, 0] = t[:, 0] | ((t[:, 1] & 0x0F) << 8)
    out[:, 1] = (t[:, 1] >> 4) | (t[:, 2] << 4)
    return out.reshape(-1)


def pack2(codes: npt.NDArray[np.integer]) -> U8:
    """Pack codes in {0,1,2,3} four per byte, the first in the lowest two bits."""
    c = np.asarray(codes, dtype=np.uint8)
    pad = (-c.size) % 4
    if pad:
        c = np.concatenate([c, np.zeros(pad, dtype=np.uint8)])
    q = c.reshape(-1, 4)
    packed = q[:, 0] | (q[:, 1] << 2) | (q[:, 2] << 4) | (q[:, 3] << 6)
    return packed.astype(np.uint8)


def unpack2(buf: U8) -> U8:
    """Inverse of pack2; returns the padded count (a multiple of four)."""
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    codes: U8 = ((buf[:, None] >> shifts[None, :]) & 0x03).astype(np.uint8).reshape(-1)
    return codes
