"""Pre-tokenized datasets and the page draws of LossScore (DESIGN.md §6).

A dataset is a folder of flat token shards (`.npy`, or raw little-endian `.bin`) and a
`manifest.json`. A page is `seq_len + 1` consecutive tokens of one shard (inputs plus shifted
targets); page j of a shard starts at token j·seq_len. Shards are memory-mapped: reading a page
touches only that page.

Draws are deterministic: assigned pages from a public seed (peers compute the same list); held-out
pages and evaluation samples from a window seed = HMAC(validator secret, window), which the
validator records so replay can redraw them without the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from pydantic import SecretBytes

MANIFEST_NAME = "manifest.json"
DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


@dataclass(frozen=True, slots=True)
class Shard:
    file: str
    n_tokens: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Manifest:
    vocab_size: int
    dtype: str
    shards: tuple[Shard, ...]

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.vocab_size <= 0 or self.vocab_size > 2 ** (8 * np.dtype(DTYPES[self.dtype]).itemsize):
            raise ValueError(f"vocab_size {self.vocab_size} does not fit {self.dtype}")

    def to_json(self) -> dict[str, Any]:
        shards = [{"file": s.file, "n_tokens": s.n_tokens, "sha256": s.sha256} for s in self.shards]
        return {"vocab_size": self.vocab_size, "dtype": self.dtype, "shards": shards}

    @staticmethod
    def from_json(raw: dict[str, Any]) -> Manifest:
        shards = tuple(Shard(str(s["file"]), int(s["n_tokens"]), str(s["sha256"])) for s in raw["shards"])
        return Manifest(int(raw["vocab_size"]), str(raw["dtype"]), shards)


def file_digest(path: Path) -> str:
    """SHA-256 of a file, streamed in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(2**20):
            h.update(block)
    return h.hexdigest()


class Dataset:
    """Memory-mapped token shards cut into pages of `seq_len + 1` tokens."""

    def __init__(self, root: Path, manifest: Manifest, seq_len: int) -> None:
        if seq_len <= 0:
            raise ValueError("seq_len must be positive")
        self.root, self.manifest, self.seq_len = root, manifest, seq_len
        self._maps = [self._map(s) for s in manifest.shards]
        per_shard = [max(0, (s.n_tokens - 1) // seq_len) for s in manifest.shards]
        self._starts = np.cumsum([0, *per_shard])  # global index of each shard's first page
        if self.n_pages == 0:
            raise ValueError(f"no page of {seq_len + 1} tokens fits in {root}")

    @staticmethod
    def open(path: str | Path, *, seq_len: int) -> Dataset:
        root = Path(path)
        manifest = Manifest.from_json(json.loads((root / MANIFEST_NAME).read_text()))
        return Dataset(root, manifest, seq_len)

    def _map(self, shard: Shard) -> npt.NDArray[np.integer[Any]]:
        path, dtype = self.root / shard.file, DTYPES[self.manifest.dtype]
        arr: npt.NDArray[np.integer[Any]]
        if path.suffix == ".npy":
            arr = np.load(path, mmap_mode="r")
            if arr.dtype != dtype or arr.ndim != 1:
                raise ValueError(f"{path}: expected flat {self.manifest.dtype}, got {arr.dtype} {arr.shape}")
        else:
            arr = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
        if arr.shape[0] != shard.n_tokens:
            raise ValueError(f"{path}: {arr.shape[0]} tokens, manifest says {shard.n_tokens}")
        return arr

    @property
    def n_pages(self) -> int:
        return int(self._starts[-1])

    def verify(self) -> list[str]:
        """Files whose content digest differs from the manifest (streamed; empty when all match)."""
        return [s.file for s in self.manifest.shards if file_digest(self.root / s.file) != s.sha256]

    def page(self, index: int) -> npt.NDArray[np.int64]:
        """Tokens of one page, (seq_len + 1,) int64 (a copy: only this page is read from disk)."""
        if not 0 <= index < self.n_pages:
            raise IndexError(f"page {index} out of range [0, {self.n_pages})")
        shard = int(np.searchsorted(self._starts, index, side="right")) - 1
        start = (index - int(self._starts[shard])) * self.seq_len
        return np.asarray(self._maps[shard][start : start + self.seq_len + 1], dtype=np.int64)


def derive_seed(*parts: str | int | bytes) -> bytes:
    """A 32-byte seed from public parts; `|`-joined so distinct tuples never collide by concatenation."""
    return hashlib.sha256(b"|".join(p if isinstance(p, bytes) else str(p).encode() for p in parts)).digest()


def draw_pages(seed: bytes, n_pages: int, total: int) -> list[int]:
    """`n_pages` distinct page indices in [0, total), in draw order, from PCG64 seeded by `seed`."""
    if not 0 < n_pages <= total:
        raise ValueError(f"cannot draw {n_pages} distinct pages from {total}")
    rng = np.random.Generator(np.random.PCG64(int.from_bytes(seed, "big")))
    return [int(i) for i in rng.choice(total, size=n_pages, replace=False)]


def assigned_pages(window: int, uid: int, *, public_seed: str, n_pages: int, dataset: Dataset) -> list[int]:
    """The pages peer `uid` must train on in `window`: anyone with the public seed computes the same."""
    return draw_pages(derive_seed("assigned", public_seed, window, uid), n_pages, dataset.n_pages)


def window_seed(secret: bytes | SecretBytes, window: int) -> str:
    """HMAC-SHA256(secret, window) as hex: unpredictable to peers, recorded for replay.

    The validator passes its secret masked (SecretBytes, whose repr hides it): unwrapped only here."""
    key = secret.get_secret_value() if isinstance(secret, SecretBytes) else secret
    return hmac.new(key, f"gauntlet/window|{window}".encode(), hashlib.sha256).hexdigest()


def heldout_from_seed(seed_hex: str, *, n_pages: int, dataset: Dataset) -> list[int]:
    return draw_pages(derive_seed("heldout", bytes.fromhex(seed_hex)), n_pages, dataset.n_pages)


def eval_sample(seed_hex: str, uid: int, *, assigned: Sequence[int], k: int) -> list[int]:
    """The k of a peer's assigned pages to evaluate on, drawn from the (secret) window seed."""
    chosen = draw_pages(
        derive_seed("eval", bytes.fromhex(seed_hex), uid), min(k, len(assigned)), len(assigned)
    )
    return [assigned[i] for i in chosen]


def batches(dataset: Dataset, pages: Sequence[int], batch_size: int) -> list[torch.Tensor]:
    """Pages stacked into (B, seq_len + 1) int64 tensors, in page order; the last batch may be short."""
    if batch_size <= 0:
        raise ValueError("batch_size must be positive")
    out = []
    for i in range(0, len(pages), batch_size):
        rows = np.stack([dataset.page(p) for p in pages[i : i + batch_size]])
        out.append(torch.from_numpy(rows))
    return out
