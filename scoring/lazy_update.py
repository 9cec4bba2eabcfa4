"""A submission kept as metadata, its parameters decoded one at a time from its file (issue 14).

Decoded, an update is int64 coordinates plus float32 values: about seven times its wire size, so a
window that kept every peer's decoded update would need terabytes of memory at the run's scale. What
a window keeps per peer instead is what the checks found (verdict, digest, per-parameter norms) and
where each tensor lies in the file on disk. Whoever needs a parameter (LossScore's apply/restore, the
copy checks, aggregation) decodes it from a read-only memory map of the file and drops it; the bytes
and the decoding functions are those of `decode_submission`, so every tensor is bit-identical to the
eager decoder's.

The map is opened per access (or per pass, `params_iter`) and closed after it: the pages of a mapped
file count towards the process's resident memory while mapped, so a map held per peer would grow the
window's memory by one wire size per peer again.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from scoring.decoder import Expected, Summary, decode_stored, decode_submission, summarize_submission
from scoring.types import DecodeResult, NormedParams, ParamSpec, SparseParam, SparseUpdate
from scoring.wire import CodecConfig


class StoredFileChanged(RuntimeError):
    """The file under a checked submission is not the one that was checked (size differs)."""


@contextmanager
def mapped(path: Path, nbytes: int | None = None) -> Iterator[mmap.mmap]:
    """`path` mapped read-only for the duration. With `nbytes`, a file of another size is refused
    before it is mapped: a mapped file shortened later would fault on access instead of raising."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if nbytes is not None and size != nbytes:
            raise StoredFileChanged(f"{path.name}: {size} bytes on disk, {nbytes} when checked")
        if size == 0:  # mmap refuses empty files; an empty submission is judged by the decoder
            raise StoredFileChanged(f"{path.name}: empty file")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield data
    finally:
        # a view that outlived the pass (held by an exception's traceback) unmaps when it is freed
        with suppress(BufferError):
            data.close()


class StoredParams(NormedParams):
    """The parameters of a checked submission file, each decoded when asked for and not kept."""

    def __init__(self, path: Path, summary: Summary, spec: ParamSpec, cfg: CodecConfig) -> None:
        self.path, self.summary, self.spec, self.cfg = Path(path), summary, dict(spec), cfg

    def norms(self) -> Mapping[str, float]:
        return self.summary.norms

    def __getitem__(self, name: str) -> SparseParam:
        shape = self.spec[name]  # KeyError for a name the model lacks, as for a dict
        with mapped(self.path, self.summary.nbytes) as data:
            return decode_stored(data, self.summary, name, shape, self.cfg)

    def __contains__(self, name: object) -> bool:
        return name in self.spec  # Mapping's default would decode the parameter to find out

    def __iter__(self) -> Iterator[str]:
        return iter(self.spec)

    def __len__(self) -> int:
        return len(self.spec)

    def params_iter(self, names: Iterable[str] | None = None) -> Iterator[tuple[str, SparseParam]]:
        """(name, parameter) in spec order (or for `names`), one map for the whole pass; each decoded
        parameter is the caller's to drop before the next is read."""
        with mapped(self.path, self.summary.nbytes) as data:
            for name in self.spec if names is None else names:
                yield name, decode_stored(data, self.summary, name, self.spec[name], self.cfg)


def judge_file(path: Path, spec: ParamSpec, expect: Expected, cfg: CodecConfig | None = None) -> DecodeResult:
    """`decode_submission`'s verdict on the file at `path`, with an update whose parameters stay on
    disk (`StoredParams`). The file must not change while the update is in use (an archived file is
    content-addressed and written once). A file that cannot be mapped is judged from its bytes."""
    cfg = cfg or CodecConfig()
    try:
        with mapped(path) as data:
            verdict, meta, summary = summarize_submission(data, spec, expect, cfg)
    except StoredFileChanged:  # empty: the decoder gives the verdict an empty file deserves
        verdict, meta, summary = summarize_submission(b"", spec, expect, cfg)
    if summary is None:
        return DecodeResult(verdict, None, meta)
    params = StoredParams(path, summary, spec, cfg)
    update = SparseUpdate(summary.meta, summary.digest, params, summary.nbytes, summary.decoded)
    return DecodeResult(verdict, update, meta)


def judge_submission(
    data: bytes | Path, spec: ParamSpec, expect: Expected, cfg: CodecConfig | None = None
) -> DecodeResult:
    """The window's decoder: bytes in memory decoded as they are; a spooled file judged on disk,
    its update kept there (`judge_file`). The same verdicts and tensors either way."""
    if isinstance(data, Path):
        return judge_file(data, spec, expect, cfg)
    return decode_submission(data, spec, expect, cfg)
