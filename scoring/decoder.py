"""The validator side of `gauntlet/1`: parse untrusted bytes into a sparse update, or a verdict.

Checks run in the order of DESIGN.md §5 items 1–5: size, container, identity, schema, content. The
decoder never raises on bad input, never executes anything from the file, and allocates at most a
small multiple of the (already capped) file size.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import safetensors

from scoring.content import decode_param
from scoring.signing import verify_signature
from scoring.types import DecodeResult, ParamSpec, Reason, SparseParam, SparseUpdate, SubmissionMeta, Verdict
from scoring.wire import (
    FORMAT,
    META_KEYS,
    CodecConfig,
    expected_tensors,
    max_submission_bytes,
    payload_digest,
    signed_message,
)

_NP_DTYPES: Mapping[str, type[np.generic]] = {"U8": np.uint8, "F16": np.float16, "F32": np.float32}


class Rejected(Exception):
    """Internal: a check failed. Converted to a Verdict before leaving this module."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True, slots=True)
class Expected:
    """What the validator knows independently of the file; None skips that comparison."""

    window: int | None = None
    uid: int | None = None
    hotkey: str | None = None
    base: str | None = None
    verify_signature: bool = True


def decode_submission(
    data: bytes, spec: ParamSpec, expect: Expected, cfg: CodecConfig | None = None
) -> DecodeResult:
    """Decode and check one submission; a bad file yields a rejecting verdict, never an exception."""
    cfg = cfg or CodecConfig()
    meta: SubmissionMeta | None = None
    try:
        if len(data) > max_submission_bytes(spec, cfg):
            raise Rejected(Reason.TOO_LARGE, f"{len(data)} bytes > cap {max_submission_bytes(spec, cfg)}")
        metadata = _read_header(data, cfg)
        tensors = _read_tensors(data)
        meta = _parse_metadata(metadata, cfg)
        digest = payload_digest(tensors)
        _check_identity(meta, digest, expect)
        _check_schema(tensors, spec, cfg)
        params = {name: _decode(name, shape, tensors, cfg) for name, shape in spec.items()}
    except Rejected as r:
        return DecodeResult(Verdict.reject(r.reason, r.detail), None, meta)
    update = SparseUpdate(meta=meta, digest=digest, params=params, nbytes=len(data))
    return DecodeResult(Verdict.accept(), update, meta)


def _read_header(data: bytes, cfg: CodecConfig) -> dict[str, Any]:
    if len(data) < 8:
        raise Rejected(Reason.NOT_SAFETENSORS, f"file of {len(data)} bytes has no header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > cfg.max_header_bytes:
        raise Rejected(Reason.BAD_HEADER, f"header of {n} bytes exceeds cap {cfg.max_header_bytes}")
    if 8 + n > len(data):
        raise Rejected(Reason.NOT_SAFETENSORS, "truncated: header runs past the end of the file")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise Rejected(Reason.NOT_SAFETENSORS, f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise Rejected(Reason.NOT_SAFETENSORS, "header is not a JSON object")
    metadata = header.get("__metadata__")
    if not isinstance(metadata, dict):
        raise Rejected(Reason.BAD_METADATA, "no __metadata__ map")
    return metadata


def _read_tensors(data: bytes) -> dict[str, npt.NDArray[np.generic]]:
    """Structural validation (offsets, lengths, dtypes) is the safetensors library's job."""
    try:
        entries = safetensors.deserialize(data)  # type: ignore[no-untyped-call]
    except Exception as e:  # the library raises SafetensorError and others on malformed input
        raise Rejected(Reason.NOT_SAFETENSORS, f"safetensors rejected the file: {e}") from None
    tensors: dict[str, npt.NDArray[np.generic]] = {}
    for name, entry in entries:
        dtype = _NP_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise Rejected(Reason.BAD_DTYPE, f"{name}: dtype {entry['dtype']} is not U8, F16 or F32")
        arr = np.frombuffer(entry["data"], dtype=np.dtype(dtype).newbyteorder("<"))
        tensors[name] = arr.reshape(entry["shape"]).astype(dtype, copy=False)
    return tensors


def _parse_metadata(metadata: Mapping[str, Any], cfg: CodecConfig) -> SubmissionMeta:
    missing = [k for k in META_KEYS if not isinstance(metadata.get(k), str)]
    if missing:
        raise Rejected(Reason.BAD_METADATA, f"metadata lacks string fields: {', '.join(missing)}")
    if metadata["format"] != FORMAT:
        raise Rejected(Reason.BAD_METADATA, f"format {metadata['format']!r} is not {FORMAT}")
    numbers: dict[str, int] = {}
    for key in ("window", "uid", "chunk", "topk"):
        text = metadata[key]
        if not (text.isascii() and text.isdigit() and len(text) <= 18):
            raise Rejected(Reason.BAD_METADATA, f"{key}={text[:40]!r} is not a non-negative integer")
        numbers[key] = int(text)
    if (numbers["chunk"], numbers["topk"]) != (cfg.chunk, cfg.topk):
        raise Rejected(Reason.BAD_METADATA, f"chunk/topk {numbers['chunk']}/{numbers['topk']} not configured")
    return SubmissionMeta(
        window=numbers["window"],
        uid=numbers["uid"],
        hotkey=metadata["hotkey"],
        base=metadata["base"],
        signature=metadata["signature"],
    )


def _check_identity(meta: SubmissionMeta, digest: str, expect: Expected) -> None:
    if expect.window is not None and meta.window != expect.window:
        raise Rejected(Reason.WRONG_WINDOW, f"file is for window {meta.window}, expected {expect.window}")
    if expect.hotkey is not None and meta.hotkey != expect.hotkey:
        raise Rejected(Reason.WRONG_HOTKEY, f"file names hotkey {meta.hotkey[:64]!r}")
    if expect.uid is not None and meta.uid != expect.uid:
        raise Rejected(Reason.WRONG_UID, f"file names uid {meta.uid}, expected {expect.uid}")
    message = signed_message(meta.window, meta.uid, meta.hotkey, meta.base, digest)
    if expect.verify_signature and not verify_signature(meta.hotkey, message, meta.signature):
        raise Rejected(Reason.BAD_SIGNATURE, "signature does not verify for the named hotkey")
    if expect.base is not None and meta.base != expect.base:
        raise Rejected(Reason.STALE_BASE, f"base {meta.base[:16]}… is not the current {expect.base[:16]}…")


def _check_schema(tensors: Mapping[str, npt.NDArray[np.generic]], spec: ParamSpec, cfg: CodecConfig) -> None:
    expected = expected_tensors(spec, cfg)
    absent = sorted(set(expected) - set(tensors))
    if absent:
        raise Rejected(Reason.MISSING_TENSOR, f"{len(absent)} missing, first {absent[0][:80]!r}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise Rejected(Reason.EXTRA_TENSOR, f"{len(extra)} unexpected, first {extra[0][:80]!r}")
    names = {np.dtype(np.uint8): "U8", np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}
    for name, (dtype, shape) in expected.items():
        arr = tensors[name]
        if names[arr.dtype] != dtype:
            raise Rejected(Reason.BAD_DTYPE, f"{name}: {names[arr.dtype]} instead of {dtype}")
        if tuple(arr.shape) != shape:
            raise Rejected(Reason.BAD_SHAPE, f"{name}: shape {list(arr.shape)} instead of {list(shape)}")


def _decode(
    name: str, shape: tuple[int, ...], tensors: Mapping[str, npt.NDArray[np.generic]], cfg: CodecConfig
) -> SparseParam:
    problem = decode_param(
        shape,
        tensors[f"{name}.idx"],
        tensors[f"{name}.val"],
        tensors[f"{name}.scale"],
        tensors[f"{name}.lut"],
        cfg,
    )
    if isinstance(problem, Verdict):
        raise Rejected(problem.reason or "invalid", f"{name}: {problem.detail}")
    return problem
