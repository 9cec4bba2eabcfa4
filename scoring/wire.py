"""The `gauntlet/1` container: names, metadata, payload digest and signed message (DESIGN.md §4)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scoring.packing import packed2_len, packed12_len
from scoring.types import ParamSpec

FORMAT = "gauntlet/1"
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


def payload_bytes(spec: ParamSpec, cfg: CodecConfig) -> int:
    """Exact size of the tensor data of a valid submission (the header comes on top)."""
    sizes = {"U8": 1, "F16": 2, "F32": 4}
    return sum(sizes[dt] * numel_of(shape) for dt, shape in expected_tensors(spec, cfg).values())


def max_submission_bytes(spec: ParamSpec, cfg: CodecConfig) -> int:
    """Hard cap for a HEAD check and a streaming read: payload plus the header cap."""
    return payload_bytes(spec, cfg) + 8 + cfg.max_header_bytes


def payload_digest(tensors: Mapping[str, npt.NDArray[np.generic]]) -> str:
    """SHA-256 over name, dtype, shape and raw little-endian bytes of each tensor, sorted by name."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        arr = tensors[name]
        for item in (
            name.encode(),
            DTYPE_NAMES[arr.dtype.name].encode(),
            ",".join(str(d) for d in arr.shape).encode(),
            np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes(),
        ):
            h.update(item)
            h.update(b"\x00")
    return h.hexdigest()


def signed_message(window: int, uid: int, hotkey: str, base: str, digest: str) -> bytes:
    return f"{FORMAT}|{window}|{uid}|{hotkey}|{base}|{digest}".encode()
