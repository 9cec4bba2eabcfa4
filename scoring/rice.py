"""`gauntlet/2` index streams: in-chunk gaps Rice-coded with a per-tensor parameter (docs/wire-format.md).

A stream is one byte k (the Rice parameter), then the K remainders (the low k bits of each gap) as
fixed-width k-bit fields, then the K quotients (gap >> k) in unary: q zero bits closed by a one bit.
Both sections are LSB-first bitstreams, each zero-padded to a byte. Splitting the two sections is
what makes decoding vectorized: the remainders are fixed-width fields, and the quotients are the
distances between consecutive one bits. With k = 0 the unary section is the chunk's bitmap cut
after its last kept position, so it is never longer than a bitmap: the bitmap fallback is built in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from scoring.types import Reason, Verdict

if TYPE_CHECKING:  # wire imports this module for the size cap
    from scoring.wire import ChunkLayout

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U16 = npt.NDArray[np.uint16]
MAX_RICE = 11  # gaps are below 4096: a larger k only adds bits


def stream_cap(layout: ChunkLayout) -> int:
    """The longest stream a decoder accepts: the size at k = 11, which the encoder's choice never exceeds.

    A gap is at most 4095, so its quotient at k = 11 is 0 or 1, and the gaps of one chunk sum to less
    than 4096, so at most one per chunk has quotient 1: K·11 remainder bits plus K + chunks unary bits.
    """
    k = layout.kept
    return 1 + (k * MAX_RICE + 7) // 8 + (k + layout.chunks + 7) // 8


def _counts(layout: ChunkLayout) -> I64:
    counts = np.full(layout.chunks, layout.k_full, dtype=np.int64)
    if layout.tail:
        counts[-1] = layout.k_tail
    return counts


def to_gaps(idx: U16, layout: ChunkLayout) -> I64:
    """Sorted in-chunk positions to gaps: the first position, then each difference minus one."""
    pos = idx.astype(np.int64)
    gaps = pos.copy()
    gaps[1:] -= pos[:-1] + 1
    starts = np.cumsum(_counts(layout))[:-1]
    gaps[starts] = pos[starts]
    gaps[:1] = pos[:1]
    return gaps


def _stream_bytes(gaps: I64, k: int) -> int:
    unary = gaps.size + int((gaps >> k).sum())
    return 1 + (gaps.size * k + 7) // 8 + (unary + 7) // 8


def encode_indices(idx: U16, layout: ChunkLayout, k: int | None = None) -> U8:
    """The stream with Rice parameter `k`; by default the shortest over k in [0, 11], ties to the smaller."""
    gaps = to_gaps(idx, layout)
    chosen = k is None
    if k is None:
        k = min(range(MAX_RICE + 1), key=lambda j: (_stream_bytes(gaps, j), j))
    rem_bits = ((gaps[:, None] >> np.arange(k)) & 1).astype(np.uint8).reshape(-1)
    q = gaps >> k
    unary = np.zeros(int(q.sum()) + gaps.size, dtype=np.uint8)
    unary[np.cumsum(q + 1) - 1] = 1
    stream = np.concatenate(
        [
            np.array([k], np.uint8),
            np.packbits(rem_bits, bitorder="little"),
            np.packbits(unary, bitorder="little"),
        ]
    )
    assert stream.size <= stream_cap(layout) or not chosen  # the choice of k keeps it (see stream_cap)
    return stream


def _remainders(section: U8, count: int, k: int) -> npt.NDArray[np.uint32]:
    """`count` k-bit fields, LSB-first: each read from the 24 bits at its byte offset (k + 7 <= 18)."""
    p = np.concatenate([section, np.zeros(3, np.uint8)]).astype(np.uint32)
    word = p[:-2] | (p[1:-1] << 8) | (p[2:] << 16)  # word[j]: bytes j, j+1, j+2 little-endian
    wide = count * k >= 1 << 32  # bit offsets of a tensor with more than ~390M kept entries
    bit = (np.arange(count, dtype=np.uint64) if wide else np.arange(count, dtype=np.uint32)) * k
    fields = word[bit >> 3] >> (bit & 7).astype(np.uint32)
    out: npt.NDArray[np.uint32] = (fields & np.uint32((1 << k) - 1)).astype(np.uint32)
    return out


def _positions(gaps: npt.NDArray[np.int32], layout: ChunkLayout, chunk: int) -> U16 | Verdict:
    """Gaps (each below the chunk length) back to in-chunk positions; a chunk they overrun is rejected."""
    step = gaps + 1
    body_n = layout.full_chunks * layout.k_full
    # int32 stays int32 only when asked (numpy promotes cumsums to int64, three times slower)
    body = np.cumsum(step[:body_n].reshape(layout.full_chunks, layout.k_full), axis=1, dtype=np.int32) - 1
    tail = np.cumsum(step[body_n:], dtype=np.int32) - 1
    if body.size and int(body[:, -1].max()) >= chunk:
        return Verdict.reject(Reason.INDEX_OUT_OF_RANGE, f"gaps sum past the chunk length {chunk}")
    if tail.size and int(tail[-1]) >= layout.tail:
        return Verdict.reject(Reason.INDEX_OUT_OF_RANGE, f"gaps sum past the last chunk's {layout.tail}")
    return np.concatenate([body.reshape(-1), tail]).astype(np.uint16)


def decode_indices(stream: U8, layout: ChunkLayout, chunk: int) -> U16 | Verdict:
    """Check and decode one stream (its length was bounded by `stream_cap` before parsing)."""
    count = layout.kept
    if stream.size < 1 or int(stream[0]) > MAX_RICE:
        return Verdict.reject(Reason.BAD_RICE_PARAMETER, f"Rice parameter must be in [0, {MAX_RICE}]")
    k = int(stream[0])
    rem_len = (count * k + 7) // 8
    if stream.size < 1 + rem_len:
        return Verdict.reject(Reason.BAD_BITSTREAM, "stream ends inside the remainders")
    rem_section = stream[1 : 1 + rem_len]
    if count * k % 8 and int(rem_section[-1]) >> (count * k % 8):
        return Verdict.reject(Reason.BAD_PADDING, "padding after the last remainder is not zero")
    bits = np.unpackbits(stream[1 + rem_len :], bitorder="little").view(np.bool_)
    population = int(np.count_nonzero(bits))  # before listing them: a hostile all-ones stream stays cheap
    if population != count:
        return Verdict.reject(Reason.BAD_BITSTREAM, f"{population} unary codes for {count} indices")
    ones = np.flatnonzero(bits)  # on the bool view: several times faster than on uint8
    if bits.size - (int(ones[-1]) + 1 if count else 0) >= 8:
        return Verdict.reject(Reason.BAD_PADDING, "a whole byte of padding after the last unary code")
    q = np.empty(count, np.int64)  # unary lengths: the distance between one bits, minus the one
    q[:1] = ones[:1]
    np.subtract(ones[1:], ones[:-1] + 1, out=q[1:])
    if count and int(q.max()) > (chunk - 1) >> k:  # one gap alone overruns: reject before any arithmetic
        return Verdict.reject(Reason.INDEX_OUT_OF_RANGE, f"a gap of at least {chunk} in a chunk of {chunk}")
    gaps = (q.astype(np.int32) << k) | _remainders(rem_section, count, k).astype(np.int32)
    return _positions(gaps, layout, chunk)
