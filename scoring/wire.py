"""The submission container: names, metadata, size bounds, payload digest and signed message.

Both formats (docs/wire-format.md) share everything here; they differ only in how `NAME.idx` holds the
kept positions: 12-bit fields in `gauntlet/1`, a Rice-coded gap stream (scoring/rice.py) in `gauntlet/2`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scoring.packing import pack12, packed2_len, packed12_len
from scoring.rice import stream_cap
from scoring.types import ParamSpec

FORMAT = "gauntlet/1"
FORMAT_V2 = "gauntlet/2"
FORMATS = (FORMAT, FORMAT_V2)
SUFFIXES = ("idx", "val", "scale", "lut")
META_KEYS = ("format", "window", "uid", "hotkey", "base", "chunk", "topk", "signature")
DTYPE_NAMES: Mapping[str, str] = {"uint8": "U8", "float16": "F16", "float32": "F32"}


@dataclass(frozen=True, slots=True)
class CodecConfig:
    """Compression geometry and the bounds a decoder enforces on untrusted values."""

    chunk: int = 4096
    topk: int = 64
    error_feedback: float = 0.95
    max_lut: float = 100.0
    max_scale: float = 1.0
    max_header_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if not 1 <= self.chunk <= 4096:
            raise ValueError("chunk must be in [1, 4096]: indices are 12-bit")
        if not 1 <= self.topk <= self.chunk:
            raise ValueError("topk must be in [1, chunk]")
        if not 0.0 <= self.error_feedback <= 1.0:
            raise ValueError("error_feedback must be in [0, 1]")
        if self.max_lut <= 0 or self.max_scale <= 0 or self.max_header_bytes < 1024:
            raise ValueError("bounds must be positive (max_header_bytes >= 1024)")


@dataclass(frozen=True, slots=True)
class ChunkLayout:
    """How one parameter of `numel` values is cut into chunks and how many entries each keeps."""

    numel: int
    chunks: int
    full_chunks: int
    tail: int  # length of the last, shorter chunk; 0 when every chunk is full
    k_full: int
    k_tail: int

    @property
    def kept(self) -> int:
        return self.full_chunks * self.k_full + (self.k_tail if self.tail else 0)

    @staticmethod
    def of(numel: int, cfg: CodecConfig) -> ChunkLayout:
        full, tail = divmod(numel, cfg.chunk)
        return ChunkLayout(
            numel=numel,
            chunks=full + (1 if tail else 0),
            full_chunks=full,
            tail=tail,
            k_full=min(cfg.topk, cfg.chunk),
            k_tail=min(cfg.topk, tail),
        )


def numel_of(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def expected_tensors(spec: ParamSpec, cfg: CodecConfig) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor a valid submission holds: name -> (safetensors dtype, shape)."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, shape in spec.items():
        layout = ChunkLayout.of(numel_of(shape), cfg)
        out[f"{name}.idx"] = ("U8", (packed12_len(layout.kept),))
        out[f"{name}.val"] = ("U8", (packed2_len(layout.kept),))
        out[f"{name}.scale"] = ("F16", (layout.chunks,))
        out[f"{name}.lut"] = ("F32", (4,))
    return out


def tensor_bounds(spec: ParamSpec, cfg: CodecConfig, fmt: str) -> dict[str, tuple[str, int, int]]:
    """Every tensor of a valid `fmt` file: name -> (dtype, least and most elements); 1-D each."""
    out = {name: (dt, shape[0], shape[0]) for name, (dt, shape) in expected_tensors(spec, cfg).items()}
    if fmt == FORMAT_V2:
        for name, shape in spec.items():
            out[f"{name}.idx"] = ("U8", 1, stream_cap(ChunkLayout.of(numel_of(shape), cfg)))
    return out


def payload_bytes(spec: ParamSpec, cfg: CodecConfig, fmt: str = FORMAT) -> int:
    """The most tensor data a valid `fmt` submission holds (exact for `gauntlet/1`; header on top)."""
    sizes = {"U8": 1, "F16": 2, "F32": 4}
    return sum(sizes[dt] * most for dt, _, most in tensor_bounds(spec, cfg, fmt).values())


def max_submission_bytes(spec: ParamSpec, cfg: CodecConfig) -> int:
    """Hard cap for a HEAD check and a streaming read: the larger format's payload plus the header cap."""
    return max(payload_bytes(spec, cfg, fmt) for fmt in FORMATS) + 8 + cfg.max_header_bytes


def canonical_tensors(
    tensors: Mapping[str, npt.NDArray[np.generic]], positions: Mapping[str, npt.NDArray[np.uint16]]
) -> Mapping[str, npt.NDArray[np.generic]]:
    """The `gauntlet/1` tensors of the same update: each `NAME.idx` in `positions` (a parameter's
    decoded in-chunk positions) replaced by its 12-bit packing; every other tensor as it is.

    The digest is taken over this form, so it names the update, not its encoding: a `gauntlet/1`
    file and every `gauntlet/2` encoding of one update (any Rice k) hash alike, and a replay cannot
    dodge the digest checks by re-encoding (docs/wire-format.md §7). Packed when read, one at a
    time: packing every stream at once held 1.5 bytes per kept value more than the file, for any
    peer that chose `gauntlet/2`."""
    return _Canonical(tensors, positions)


class _Canonical(Mapping[str, npt.NDArray[np.generic]]):
    def __init__(
        self, tensors: Mapping[str, npt.NDArray[np.generic]], positions: Mapping[str, npt.NDArray[np.uint16]]
    ) -> None:
        self._tensors, self._positions = tensors, positions

    def __getitem__(self, name: str) -> npt.NDArray[np.generic]:
        if name.endswith(".idx") and (idx := self._positions.get(name[: -len(".idx")])) is not None:
            return pack12(idx)
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def payload_digest(tensors: Mapping[str, npt.NDArray[np.generic]]) -> str:
    """SHA-256 over name, dtype, shape and raw little-endian bytes of each tensor, sorted by name.

    The signed digest of a submission is this over its canonical (`gauntlet/1`) tensors."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        arr = tensors[name]
        little = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False)
        for item in (
            name.encode(),
            DTYPE_NAMES[arr.dtype.name].encode(),
            ",".join(str(d) for d in arr.shape).encode(),
            little.reshape(-1).view(np.uint8).data,  # hashed in place: no copy of the payload
        ):
            h.update(item)
            h.update(b"\x00")
    return h.hexdigest()


def signed_message(window: int, uid: int, hotkey: str, base: str, digest: str, fmt: str = FORMAT) -> bytes:
    """What the hotkey signs; it names the format, so a file cannot be relabelled as the other one."""
    return f"{fmt}|{window}|{uid}|{hotkey}|{base}|{digest}".encode()
