"""The safetensors container of a submission, parsed and validated without trusting a single field.

Our own parser rather than the safetensors library: every number in the header is bounded before it
is used (JSON integers of thousands of digits, ranks of dozens, dimension products that overflow),
the tensor views are zero-copy slices of the file, and nothing is allocated in proportion to what the
header claims. Structural rules match the safetensors format: data offsets relative to the end of the
header, tiling the data section exactly, no gaps or overlaps.
"""

from __future__ import annotations

import gc
import json
import mmap
import re
import struct
import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scoring.types import Reason

Data = bytes | mmap.mmap  # a whole file in memory, or the file mapped read-only (never written through)
ITEMSIZE: Mapping[str, int] = {"U8": 1, "F16": 2, "F32": 4}
_NP_DTYPES: Mapping[str, str] = {"U8": "<u1", "F16": "<f2", "F32": "<f4"}
_MAX_INT_DIGITS = 20  # any honest size or offset fits in 2**64; longer integers are hostile
_MAX_NESTING = 3  # header object > entry or __metadata__ > shape or offsets list: nothing deeper
# A JSON string literal, escapes included, or an unclosed one running to the end: every attempt
# matches, so no byte is scanned twice (a pattern that failed on an unclosed string was retried at
# every later quote: a 1 MiB header of escaped quotes took about 45 minutes, holding the GIL)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_MAX_DIM = 1 << 48  # above any tensor a 72B-parameter submission holds, far below int64 overflow


class Rejected(Exception):
    """Internal: a check failed. Converted to a Verdict at the decoder's boundary."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True, slots=True)
class Entry:
    """One tensor's header entry after validation: 1-D, known dtype, bytes inside the file."""

    dtype: str
    length: int  # number of elements (every submission tensor is 1-D)
    start: int  # absolute byte offset in the file
    end: int


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text)} digits")
    return int(text)


def _refuse_constant(text: str) -> float:
    raise ValueError(f"{text} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Duplicate keys would let two parsers see two different files; refuse them."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in the header")
    return out


class _Pause:
    """Who holds the cyclic collector paused. Reading `gc.isenabled()` and disabling it as two steps
    raced between threads decoding at once (`EagerDecoder(workers=N)`): one could read "disabled"
    from another's pause and never re-enable it, leaving the collector off for the process."""

    lock = threading.Lock()
    holders = 0
    restore = False


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Tens of thousands of small objects from one (capped) header would trigger the cyclic collector
    over and over (10x the parse time); pause it for the parse, restoring whatever state it had
    before the first of the overlapping pauses began."""
    with _Pause.lock:
        if _Pause.holders == 0:
            _Pause.restore = gc.isenabled()
            gc.disable()
        _Pause.holders += 1
    try:
        yield
    finally:
        with _Pause.lock:
            _Pause.holders -= 1
            if _Pause.holders == 0 and _Pause.restore:
                gc.enable()


def _load_header(data: Data, max_header_bytes: int) -> tuple[dict[str, Any], int]:
    if len(data) < 8:
        raise Rejected(Reason.NOT_SAFETENSORS, f"file of {len(data)} bytes has no header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > max_header_bytes:
        raise Rejected(Reason.BAD_HEADER, f"header of {n} bytes exceeds cap {max_header_bytes}")
    if 8 + n > len(data):
        raise Rejected(Reason.NOT_SAFETENSORS, "truncated: header runs past the end of the file")
    raw = bytes(data[8 : 8 + n])
    if _nesting(raw) > _MAX_NESTING:
        raise Rejected(Reason.NOT_SAFETENSORS, f"header nests deeper than {_MAX_NESTING} levels")
    try:
        with _collector_paused():
            header = json.loads(
                raw.decode("utf-8"),
                parse_int=_parse_int,
                parse_constant=_refuse_constant,
                object_pairs_hook=_unique_keys,
            )
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise Rejected(Reason.NOT_SAFETENSORS, f"header is not valid JSON: {str(e)[:120]}") from None
    if not isinstance(header, dict):
        raise Rejected(Reason.NOT_SAFETENSORS, "header is not a JSON object")
    return header, 8 + n


def _nesting(raw: bytes) -> int:
    """How deep the header's arrays and objects nest (exact for valid JSON), counted without the
    parser: its recursion budget is shared with the caller's stack, so a header nested near the
    limit parsed on a worker thread and raised on a deeper stack, and one file had two verdicts."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    return int(np.cumsum(np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)).max())


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _entry(name: str, raw: object, data_start: int) -> Entry:
    """Validate one header entry: dtype, rank 1, bounded dimension, offsets that match the size."""
    if not isinstance(raw, dict) or set(raw) != {"dtype", "shape", "data_offsets"}:
        raise Rejected(Reason.NOT_SAFETENSORS, f"{name[:80]!r}: entry is not {{dtype, shape, data_offsets}}")
    dtype, shape, offsets = raw["dtype"], raw["shape"], raw["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        raise Rejected(Reason.BAD_DTYPE, f"{name[:80]}: dtype {str(dtype)[:16]!r} is not U8, F16 or F32")
    if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
        raise Rejected(Reason.NOT_SAFETENSORS, f"{name[:80]}: shape is not a list of integers")
    if len(shape) != 1:
        raise Rejected(Reason.BAD_SHAPE, f"{name[:80]}: rank {len(shape)}; every tensor is 1-D")
    if not 0 <= shape[0] <= _MAX_DIM:
        raise Rejected(Reason.BAD_SHAPE, f"{name[:80]}: dimension {str(shape[0])[:24]} out of range")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise Rejected(Reason.NOT_SAFETENSORS, f"{name[:80]}: data_offsets is not two integers")
    begin, end = offsets
    if not 0 <= begin <= end or end - begin != shape[0] * ITEMSIZE[dtype]:
        raise Rejected(Reason.NOT_SAFETENSORS, f"{name[:80]}: data_offsets do not match dtype and shape")
    return Entry(dtype, shape[0], data_start + begin, data_start + end)


def _check_names(names: Collection[str], expected: Collection[str]) -> None:
    """A set difference, before any entry is looked at: a flood of unknown tensors costs nothing more."""
    absent = sorted(set(expected) - set(names))
    if absent:
        raise Rejected(Reason.MISSING_TENSOR, f"{len(absent)} missing, first {absent[0][:80]!r}")
    extra = sorted(set(names) - set(expected))
    if extra:
        raise Rejected(Reason.EXTRA_TENSOR, f"{len(extra)} unexpected, first {extra[0][:80]!r}")


def read_container(
    data: Data, max_header_bytes: int, expected: Collection[str] | None
) -> tuple[dict[str, Any], dict[str, Entry]]:
    """The raw `__metadata__` map and the expected tensors, each validated; the data tiled exactly."""
    header, data_start = _load_header(data, max_header_bytes)
    metadata = header.pop("__metadata__", None)
    if not isinstance(metadata, dict):
        raise Rejected(Reason.BAD_METADATA, "no __metadata__ map")
    if not all(isinstance(v, str) for v in metadata.values()):  # safetensors: a map of strings
        raise Rejected(Reason.BAD_METADATA, "__metadata__ holds a value that is not a string")
    if expected is not None:  # None: any names (tools reading a file's metadata)
        _check_names(header, expected)
    entries = {name: _entry(name, raw, data_start) for name, raw in header.items()}
    cursor = data_start
    for e in sorted(entries.values(), key=lambda e: (e.start, e.end)):
        if e.start != cursor:
            raise Rejected(Reason.NOT_SAFETENSORS, "tensor data overlaps or leaves a gap")
        cursor = e.end
    if cursor != len(data):
        raise Rejected(Reason.NOT_SAFETENSORS, f"data section ends at {cursor}, the file at {len(data)}")
    return metadata, entries


def view(data: Data, entry: Entry) -> npt.NDArray[Any]:
    """A zero-copy, read-only little-endian view of one tensor's bytes."""
    return np.frombuffer(
        data, dtype=np.dtype(_NP_DTYPES[entry.dtype]), count=entry.length, offset=entry.start
    )
