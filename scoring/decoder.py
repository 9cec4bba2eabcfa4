"""The validator side of the wire format: parse untrusted bytes into a sparse update, or a verdict.

Checks run cheapest first: size, container (our own bounded parser), metadata, schema (names, dtypes
and lengths against the parameter spec, from the header alone), then identity (payload digest and
signature) and content. The digest is over the decoded update (its `gauntlet/1` form), so the
`gauntlet/2` index streams are decoded just before it. So a header of thousands of empty or unknown
tensors is refused before a single byte is hashed. The decoder never raises on bad input, never
executes anything from the file, and allocates at most a small multiple of the (already capped) file
size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scoring.container import Data, Entry, Rejected, read_container, view
from scoring.content import PackedValues, decode_param, indices_v1
from scoring.decoded_digest import decoded_digest, digest_of, param_digest
from scoring.rice import decode_indices
from scoring.signing import verify_signature
from scoring.types import DecodeResult, ParamSpec, Reason, SparseParam, SparseUpdate, SubmissionMeta, Verdict
from scoring.wire import (
    FORMAT,
    FORMAT_V2,
    FORMATS,
    META_KEYS,
    ChunkLayout,
    CodecConfig,
    canonical_tensors,
    max_submission_bytes,
    numel_of,
    payload_digest,
    signed_message,
    tensor_bounds,
)

__all__ = [
    "REREAD", "UNEXPECTED", "Data", "Expected", "Rejected", "Summary", "decode_stored", "decode_submission",
    "read_format", "submission_digest", "summarize_submission",
]  # fmt: skip
UNEXPECTED = "decoder could not parse the file"  # the detail of a verdict from the catch-all boundary


@dataclass(frozen=True, slots=True)
class Expected:
    """What the validator knows independently of the file; None skips that comparison."""

    window: int | None = None
    uid: int | None = None
    hotkey: str | None = None
    base: str | None = None
    verify_signature: bool = True
    # the decoded digest (replay detection): re-reads of a file accepted before skip it, a pass over
    # every kept value that only the window's checks use
    digest_values: bool = True


# A file read again after the window's checks accepted it (an archived update): its signature and
# identity were checked then, and its decoded digest recorded.
REREAD = Expected(verify_signature=False, digest_values=False)


def decode_submission(
    data: Data, spec: ParamSpec, expect: Expected, cfg: CodecConfig | None = None
) -> DecodeResult:
    """Decode and check one submission; a bad file yields a rejecting verdict, never an exception."""
    cfg = cfg or CodecConfig()
    meta: SubmissionMeta | None = None
    try:
        meta, _, entries, positions, digest = _checked(data, spec, expect, cfg)
        tensors = {name: view(data, e) for name, e in entries.items()}
        params = {name: _decode(name, shape, tensors, cfg, positions) for name, shape in spec.items()}
        decoded = digest_of(params) if expect.digest_values else None
    except Rejected as r:
        return DecodeResult(Verdict.reject(r.reason, r.detail), None, meta)
    except Exception as e:  # the boundary for hostile bytes: a verdict, never a crash
        return DecodeResult(_unexpected(e), None, meta)
    update = SparseUpdate(meta=meta, digest=digest, params=params, nbytes=len(data), decoded=decoded)
    return DecodeResult(Verdict.accept(), update, meta)


@dataclass(frozen=True, slots=True)
class Summary:
    """A submission that passed every check, kept as metadata: where each tensor lies in the file and
    each parameter's norm. `decode_stored` reads one parameter back from the same bytes."""

    meta: SubmissionMeta
    digest: str
    fmt: str
    entries: Mapping[str, Entry]
    norms: Mapping[str, float]
    nbytes: int
    decoded: str | None  # the decoded values' digest (scoring/decoded_digest.py), if asked for


def summarize_submission(
    data: Data, spec: ParamSpec, expect: Expected, cfg: CodecConfig | None = None
) -> tuple[Verdict, SubmissionMeta | None, Summary | None]:
    """The checks of `decode_submission`, every parameter decoded once for its norm and dropped: at
    most one parameter's decoded form (plus the index positions the digest needs) is alive at once."""
    cfg = cfg or CodecConfig()
    meta: SubmissionMeta | None = None
    try:
        meta, fmt, entries, positions, digest = _checked(data, spec, expect, cfg)
        tensors = {name: view(data, e) for name, e in entries.items()}
        norms: dict[str, float] = {}
        parts: dict[str, bytes] = {}
        for name, shape in spec.items():
            param = _decode(name, shape, tensors, cfg, positions)
            norms[name] = param.norm()
            if expect.digest_values:
                parts[name] = param_digest(name, param)
            del param
            positions.pop(name, None)  # each stream's positions freed once its parameter is checked
        del tensors
    except Rejected as r:
        return Verdict.reject(r.reason, r.detail), meta, None
    except Exception as e:  # the boundary for hostile bytes: a verdict, never a crash
        return _unexpected(e), meta, None
    decoded = decoded_digest(parts) if expect.digest_values else None
    summary = Summary(meta, digest, fmt, entries, norms, len(data), decoded)
    return Verdict.accept(), meta, summary


def decode_stored(
    data: Data, summary: Summary, name: str, shape: tuple[int, ...], cfg: CodecConfig
) -> SparseParam:
    """One parameter of a summarized file, from the same bytes: bit-identical to `decode_submission`'s.

    Raises `Rejected` when the bytes no longer decode (they were checked: the storage changed them)."""
    names = (f"{name}.idx", f"{name}.val", f"{name}.scale", f"{name}.lut")
    tensors = {n: view(data, summary.entries[n]) for n in names}
    positions = _stream_positions({name: shape}, tensors, cfg) if summary.fmt == FORMAT_V2 else {}
    return _decode(name, shape, tensors, cfg, positions)


def _checked(
    data: Data, spec: ParamSpec, expect: Expected, cfg: CodecConfig
) -> tuple[SubmissionMeta, str, dict[str, Entry], dict[str, npt.NDArray[np.uint16]], str]:
    """Size, container, metadata, schema and identity: every check before the content's."""
    cap = max_submission_bytes(spec, cfg)
    if len(data) > cap:
        raise Rejected(Reason.TOO_LARGE, f"{len(data)} bytes > cap {cap}")
    bounds = tensor_bounds(spec, cfg, FORMAT)  # the same names in every format
    metadata, entries = read_container(data, cfg.max_header_bytes, bounds)
    meta, fmt = _parse_metadata(metadata, cfg)
    _check_schema(entries, tensor_bounds(spec, cfg, fmt))
    tensors = {name: view(data, e) for name, e in entries.items()}
    positions = _stream_positions(spec, tensors, cfg) if fmt == FORMAT_V2 else {}
    digest = payload_digest(canonical_tensors(tensors, positions))
    _check_identity(meta, fmt, digest, expect)
    return meta, fmt, entries, positions, digest


def _unexpected(e: Exception) -> Verdict:
    return Verdict.reject(Reason.BAD_HEADER, f"{UNEXPECTED}: {type(e).__name__}: {str(e)[:120]}")


def submission_digest(
    tensors: Mapping[str, npt.NDArray[np.generic]], spec: ParamSpec, cfg: CodecConfig, fmt: str
) -> str:
    """The digest a `fmt` file of these tensors signs (docs/wire-format.md §7), for tools that re-sign
    files; raises `Rejected` when a `gauntlet/2` index stream does not decode."""
    positions = _stream_positions(spec, tensors, cfg) if fmt == FORMAT_V2 else {}
    return payload_digest(canonical_tensors(tensors, positions))


def read_format(data: Data, cfg: CodecConfig | None = None) -> str | None:
    """The `format` a file declares, when it is a readable container naming a known one; else None."""
    try:
        metadata, _ = read_container(data, (cfg or CodecConfig()).max_header_bytes, None)
    except Rejected:
        return None
    fmt = metadata.get("format")
    return fmt if fmt in FORMATS else None


_DECIMAL = re.compile(r"0|[1-9][0-9]{0,17}")
_FORMS = {
    "hotkey": re.compile(r"[1-9A-HJ-NP-Za-km-z]{46,50}"),  # base58, the length of an ss58 address
    "base": re.compile(r"[0-9a-f]{64}"),
    "signature": re.compile(r"[0-9a-f]{128}"),
}
_FORM_NAMES = {
    "hotkey": "an ss58 address",
    "base": "a lowercase hex SHA-256",
    "signature": "lowercase hex of 64 bytes",
}


def _parse_metadata(metadata: Mapping[str, Any], cfg: CodecConfig) -> tuple[SubmissionMeta, str]:
    missing = [k for k in META_KEYS if not isinstance(metadata.get(k), str)]
    if missing:
        raise Rejected(Reason.BAD_METADATA, f"metadata lacks string fields: {', '.join(missing)}")
    # every field is printable ASCII (a format name, decimal numbers, an SS58 address, hex): a NUL, a
    # lone surrogate or a control character would otherwise reach the signed message's encoding and
    # the recorded detail (PostgreSQL's text refuses NUL: one peer could fail every commit)
    if odd := [k for k in META_KEYS if not (metadata[k].isascii() and metadata[k].isprintable())]:
        raise Rejected(Reason.BAD_METADATA, f"metadata fields not printable ASCII: {', '.join(odd)}")
    if metadata["format"] not in FORMATS:
        raise Rejected(Reason.BAD_METADATA, f"format {metadata['format'][:40]!r} is not one of {FORMATS}")
    numbers: dict[str, int] = {}
    for key in ("window", "uid", "chunk", "topk"):
        text = metadata[key]
        if not _DECIMAL.fullmatch(text):  # one spelling: "07" re-spelled a signed file as another
            raise Rejected(Reason.BAD_METADATA, f"{key}={text[:40]!r} is not a non-negative integer")
        numbers[key] = int(text)
    if (numbers["chunk"], numbers["topk"]) != (cfg.chunk, cfg.topk):
        raise Rejected(Reason.BAD_METADATA, f"chunk/topk {numbers['chunk']}/{numbers['topk']} not configured")
    # one spelling per field: a lenient parse gave one signed update several accepted encodings
    # (upper-case or spaced hex), and a megabyte-long "hotkey" took minutes in the ss58 decoder
    for key, form in _FORMS.items():
        if not form.fullmatch(metadata[key]):
            raise Rejected(Reason.BAD_METADATA, f"{key}={metadata[key][:40]!r} is not {_FORM_NAMES[key]}")
    meta = SubmissionMeta(
        window=numbers["window"],
        uid=numbers["uid"],
        hotkey=metadata["hotkey"],
        base=metadata["base"],
        signature=metadata["signature"],
    )
    return meta, str(metadata["format"])


def _check_identity(meta: SubmissionMeta, fmt: str, digest: str, expect: Expected) -> None:
    if expect.window is not None and meta.window != expect.window:
        raise Rejected(Reason.WRONG_WINDOW, f"file is for window {meta.window}, expected {expect.window}")
    if expect.hotkey is not None and meta.hotkey != expect.hotkey:
        raise Rejected(Reason.WRONG_HOTKEY, f"file names hotkey {meta.hotkey[:64]!r}")
    if expect.uid is not None and meta.uid != expect.uid:
        raise Rejected(Reason.WRONG_UID, f"file names uid {meta.uid}, expected {expect.uid}")
    message = signed_message(meta.window, meta.uid, meta.hotkey, meta.base, digest, fmt)
    if expect.verify_signature and not verify_signature(meta.hotkey, message, meta.signature):
        raise Rejected(Reason.BAD_SIGNATURE, "signature does not verify for the named hotkey")
    if expect.base is not None and meta.base != expect.base:
        raise Rejected(Reason.STALE_BASE, f"base {meta.base[:16]!r}… is not the current {expect.base[:16]}…")


def _check_schema(entries: Mapping[str, Entry], bounds: Mapping[str, tuple[str, int, int]]) -> None:
    """The names were checked by the container; here each dtype and length, before any byte is read."""
    for name, (dtype, least, most) in bounds.items():
        entry = entries[name]
        if entry.dtype != dtype:
            raise Rejected(Reason.BAD_DTYPE, f"{name}: {entry.dtype} instead of {dtype}")
        if not least <= entry.length <= most:
            span = f"[{least}]" if least == most else f"[{least}..{most}]"
            raise Rejected(Reason.BAD_SHAPE, f"{name}: shape [{entry.length}] instead of {span}")


def _stream_positions(
    spec: ParamSpec, tensors: Mapping[str, npt.NDArray[np.generic]], cfg: CodecConfig
) -> dict[str, npt.NDArray[np.uint16]]:
    """Every `gauntlet/2` index stream decoded and checked: the digest is taken over the positions,
    so the streams are decoded before the identity checks (cheap: vectorized, the file is capped)."""
    out: dict[str, npt.NDArray[np.uint16]] = {}
    for name, shape in spec.items():
        layout = ChunkLayout.of(numel_of(shape), cfg)
        idx = decode_indices(tensors[f"{name}.idx"].astype(np.uint8, copy=False), layout, cfg.chunk)
        if isinstance(idx, Verdict):
            raise Rejected(idx.reason or "invalid", f"{name}.idx: {idx.detail}")
        out[name] = idx
    return out


def _decode(
    name: str,
    shape: tuple[int, ...],
    tensors: Mapping[str, npt.NDArray[np.generic]],
    cfg: CodecConfig,
    positions: Mapping[str, npt.NDArray[np.uint16]],
) -> SparseParam:
    """One parameter's values; its positions come from `positions` (`gauntlet/2`) or its 12-bit fields."""
    layout = ChunkLayout.of(numel_of(shape), cfg)
    stream = tensors[f"{name}.idx"].astype(np.uint8, copy=False)
    idx = positions[name] if name in positions else indices_v1(stream, layout, cfg)
    out = (
        idx
        if isinstance(idx, Verdict)
        else decode_param(shape, layout, idx, PackedValues.of(tensors, name), cfg)
    )
    if isinstance(out, Verdict):
        raise Rejected(out.reason or "invalid", f"{name}: {out.detail}")
    return out
