"""Text to the token shards and manifest the validator reads (`scoring/data.py`), and their check.

Documents come from JSONL (one object per line, the text in a named field), Parquet (a text column,
read in record batches) or plain files (one document each). They are tokenized with the subnet's
own tokenizer (a local `tokenizer.json`, through the `tokenizers` library: nothing is downloaded),
joined with an end-of-document token, and streamed into raw little-endian `.bin` shards of
`shard_tokens` tokens. The manifest is written last, so a build that stopped half-way is never
mistaken for a dataset.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from scoring.data import DTYPES, MANIFEST_NAME, Dataset, Manifest, Shard, file_digest

TEXT_SUFFIXES = (".txt", ".md", ".text")
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "[SEP]")
Progress = Callable[[int], None]  # bytes of input consumed since the last call


@dataclass(frozen=True, slots=True)
class BuildConfig:
    text_field: str = "text"
    shard_tokens: int = 100_000_000
    batch_docs: int = 256  # documents tokenized per call (the Rust tokenizer runs a batch in parallel)
    eos: str | None = None  # the separator token; None: the tokenizer's usual end-of-text token

    def __post_init__(self) -> None:
        if self.shard_tokens < 2 or self.batch_docs < 1 or not self.text_field:
            raise ValueError("need shard_tokens >= 2, batch_docs >= 1 and a text field")


def input_files(paths: Sequence[Path]) -> list[Path]:
    """Files named, and the supported files under folders named, in a stable order."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and kind_of(f) is not None)
        elif p.is_file():
            if kind_of(p) is None:
                raise ValueError(
                    f"{p}: not .jsonl, .parquet or a plain-text file ({', '.join(TEXT_SUFFIXES)})"
                )
            out.append(p)
        else:
            raise ValueError(f"{p}: no such file or folder")
    if not out:
        raise ValueError("no input files (.jsonl, .parquet, .txt)")
    return out


def kind_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    return "text" if suffix in TEXT_SUFFIXES else None


def _jsonl(path: Path, field: str, progress: Progress) -> Iterator[str]:
    with path.open("rb") as f:
        for n, line in enumerate(f, start=1):
            progress(len(line))
            if not line.strip():
                continue
            try:
                text = json.loads(line)[field]
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: no string field {field!r} ({type(e).__name__})") from None
            if not isinstance(text, str):
                raise ValueError(f"{path}:{n}: field {field!r} is not a string")
            yield text


def _parquet(path: Path, field: str, progress: Progress) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        raise ValueError("reading Parquet needs pyarrow: pip install 'gauntlet-validator[data]'") from None
    table = pq.ParquetFile(path)
    if field not in table.schema_arrow.names:
        raise ValueError(f"{path}: no column {field!r} (columns: {', '.join(table.schema_arrow.names)})")
    rows, size = max(table.metadata.num_rows, 1), path.stat().st_size
    for batch in table.iter_batches(columns=[field], batch_size=1024):
        progress(size * batch.num_rows // rows)
        yield from (t for t in batch.column(0).to_pylist() if isinstance(t, str))


def documents(files: Sequence[Path], field: str, progress: Progress) -> Iterator[str]:
    for path in files:
        kind = kind_of(path)
        if kind == "jsonl":
            yield from _jsonl(path, field, progress)
        elif kind == "parquet":
            yield from _parquet(path, field, progress)
        else:
            progress(path.stat().st_size)
            yield path.read_text(encoding="utf-8", errors="replace")


def eos_id(tokenizer: Tokenizer, name: str | None) -> int:
    """The id that ends each document, so no page silently runs one document into the next."""
    for candidate in (name,) if name else EOS_CANDIDATES:
        token = tokenizer.token_to_id(candidate)
        if token is not None:
            return int(token)
    wanted = name or " / ".join(EOS_CANDIDATES)
    raise ValueError(f"the tokenizer has no end-of-document token {wanted}: name one with --eos")


class ShardWriter:
    """Streams token ids into `shard_{i:05d}.bin` files of at most `shard_tokens` tokens."""

    def __init__(self, out: Path, dtype: str, shard_tokens: int) -> None:
        self.out, self.dtype, self.limit = out, np.dtype(DTYPES[dtype]).newbyteorder("<"), shard_tokens
        self.shards: list[Shard] = []
        self._file: IO[bytes] | None = None
        self._count = 0

    def write(self, ids: npt.NDArray[np.int64]) -> None:
        while ids.size:
            if self._file is None:
                self._file = (self.out / f"shard_{len(self.shards):05d}.bin").open("wb")
            take = min(self.limit - self._count, ids.size)
            self._file.write(ids[:take].astype(self.dtype).tobytes())
            self._count += take
            ids = ids[take:]
            if self._count == self.limit:
                self._close()

    def _close(self) -> None:
        if self._file is None:
            return
        path = Path(self._file.name)
        self._file.close()
        self.shards.append(Shard(path.name, self._count, file_digest(path)))
        self._file, self._count = None, 0

    def finish(self) -> tuple[Shard, ...]:
        self._close()
        return tuple(self.shards)


def load_tokenizer(path: Path) -> Tokenizer:
    """A `tokenizer.json`; the tokenizers library raises a bare Exception for a bad file."""
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # its only error type
        raise ValueError(f"cannot read the tokenizer {path}: {e}") from None


def build_dataset(
    files: Sequence[Path], tokenizer: Tokenizer, out: Path, cfg: BuildConfig, progress: Progress
) -> Manifest:
    """Tokenize every document of `files` into shards under `out`; write and return the manifest."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = "uint16" if vocab <= 2**16 else "uint32"
    end = eos_id(tokenizer, cfg.eos)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_NAME).unlink(missing_ok=True)  # replaced only once the new shards are complete
    for stale in out.glob("shard_*.bin"):
        stale.unlink()
    writer = ShardWriter(out, dtype, cfg.shard_tokens)
    batch: list[str] = []
    for doc in documents(files, cfg.text_field, progress):
        batch.append(doc)
        if len(batch) == cfg.batch_docs:
            writer.write(_encode(tokenizer, batch, end))
            batch = []
    if batch:
        writer.write(_encode(tokenizer, batch, end))
    shards = writer.finish()
    if not shards:
        raise ValueError("the inputs hold no text")
    manifest = Manifest(vocab_size=vocab, dtype=dtype, shards=shards)
    tmp = out / f"{MANIFEST_NAME}.tmp"
    tmp.write_text(json.dumps(manifest.to_json(), indent=2))
    tmp.replace(out / MANIFEST_NAME)
    return manifest


def _encode(tokenizer: Tokenizer, docs: list[str], end: int) -> npt.NDArray[np.int64]:
    # no special tokens added per document: the separator is the only one, placed by us
    encoded = tokenizer.encode_batch(docs, add_special_tokens=False)
    return np.concatenate([np.asarray([*e.ids, end], dtype=np.int64) for e in encoded])


def verify_dataset(root: Path, *, seq_len: int, tokenizer_path: Path | None = None) -> dict[str, object]:
    """Check what the validator relies on: the manifest parses, every shard has its digest and size,
    every id is below the vocabulary, pages fit; raises ValueError naming the first problem."""
    dataset = Dataset.open(root, seq_len=seq_len)
    changed = dataset.verify()
    if changed:
        raise ValueError(f"digest differs from the manifest: {', '.join(changed)}")
    vocab = dataset.manifest.vocab_size
    for shard in dataset.manifest.shards:
        path, dtype = root / shard.file, np.dtype(DTYPES[dataset.manifest.dtype]).newbyteorder("<")
        tokens = np.load(path, mmap_mode="r") if path.suffix == ".npy" else np.memmap(path, dtype, mode="r")
        top = max((int(tokens[i : i + 2**24].max()) for i in range(0, tokens.size, 2**24)), default=0)
        if top >= vocab:
            raise ValueError(f"{shard.file}: token id {top} >= vocab_size {vocab}")
    if tokenizer_path is not None:
        theirs = load_tokenizer(tokenizer_path).get_vocab_size(with_added_tokens=True)
        if theirs != vocab:
            raise ValueError(f"the tokenizer has {theirs} ids, the manifest says vocab_size {vocab}")
    tokens_total = sum(s.n_tokens for s in dataset.manifest.shards)
    return {"ok": True, "shards": len(dataset.manifest.shards), "tokens": tokens_total,
            "pages": dataset.n_pages, "vocab_size": vocab, "dtype": dataset.manifest.dtype}  # fmt: skip
