"""`gauntlet/2`: Rice-coded index streams, literal bytes, equivalence with `gauntlet/1`, every check."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load

from scoring.decoder import Expected, decode_submission
from scoring.encoder import compress, encode_submission, pack_tensors
from scoring.rice import decode_indices, encode_indices, stream_cap
from scoring.types import Reason, Verdict
from scoring.wire import FORMAT, FORMAT_V2, ChunkLayout, CodecConfig, max_submission_bytes
from tests.codec_fixtures import (
    BASE,
    CFG,
    KEY,
    SPEC,
    UID,
    WINDOW,
    expect,
    make_file,
    random_delta,
    sign_tensors,
)
from tests.test_decoder_rejects import signed

U16 = np.uint16


def test_literal_streams_from_the_format_document() -> None:
    # gaps 1, 0, 4, 7: k = 0 wins (ties go to the smaller k); the unary section is the chunk's bitmap
    layout = ChunkLayout.of(16, CodecConfig(chunk=16, topk=4))
    assert encode_indices(np.array([1, 2, 7, 15], U16), layout).tobytes() == bytes.fromhex("008680")
    # gaps 10, 29 with k = 3: remainders 2, 5 -> 0b101_010; quotients 1, 3 -> bits 01 0001
    layout = ChunkLayout.of(64, CodecConfig(chunk=64, topk=2))
    assert encode_indices(np.array([10, 40], U16), layout).tobytes() == bytes.fromhex("032a22")


@settings(max_examples=200, deadline=None)
@given(
    numel=st.integers(0, 3 * 4096 + 100),
    topk=st.sampled_from([1, 2, 7, 64, 4096]),
    clustered=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_streams_round_trip_and_stay_under_the_cap(numel: int, topk: int, clustered: bool, seed: int) -> None:
    """Any valid index set, uniform or bunched at the chunk's ends, round-trips within `stream_cap`."""
    cfg = CodecConfig(topk=topk)
    layout = ChunkLayout.of(numel, cfg)
    rng = np.random.default_rng(seed)
    parts = []
    for c in range(layout.chunks):
        length = cfg.chunk if c < layout.full_chunks else layout.tail
        k = layout.k_full if c < layout.full_chunks else layout.k_tail
        weights = np.linspace(1.0, 50.0, length) ** 4 if clustered else np.ones(length)
        parts.append(np.sort(rng.choice(length, k, replace=False, p=weights / weights.sum())))
    idx = np.concatenate(parts).astype(U16) if parts else np.zeros(0, U16)
    stream = encode_indices(idx, layout)
    assert stream.size <= stream_cap(layout)
    decoded = decode_indices(stream, layout, cfg.chunk)
    assert not isinstance(decoded, Verdict), decoded
    assert decoded.tolist() == idx.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_v2_decodes_to_the_bit_identical_update_of_v1(seed: int) -> None:
    compressed = compress(random_delta(seed), None, CFG)
    files = {
        fmt: encode_submission(compressed, window=WINDOW, uid=UID, base=BASE, signer=KEY, cfg=CFG, fmt=fmt)
        for fmt in (FORMAT, FORMAT_V2)
    }
    v1, v2 = (decode_submission(files[f], SPEC, expect()).update for f in (FORMAT, FORMAT_V2))
    assert v1 is not None and v2 is not None
    assert len(files[FORMAT_V2]) < len(files[FORMAT])
    for name in SPEC:
        assert torch.equal(v1.params[name].indices, v2.params[name].indices)
        assert torch.equal(v1.params[name].values, v2.params[name].values)
        assert v1.params[name].shape == v2.params[name].shape


def test_the_encoder_writes_v2_by_default_and_v1_on_request() -> None:
    compressed = compress(random_delta(0), None, CFG)
    for fmt, expected in ((None, FORMAT_V2), (FORMAT, FORMAT)):
        kwargs = {} if fmt is None else {"fmt": fmt}
        data = encode_submission(compressed, window=1, uid=2, base=BASE, signer=KEY, cfg=CFG, **kwargs)
        assert f'"format":"{expected}"'.encode() in data


def test_v2_beats_200x_and_both_formats_fit_the_cap() -> None:
    spec: dict[str, tuple[int, ...]] = {"w": (512, 4096)}  # 512 full chunks of random data
    compressed = compress(random_delta(0, spec), None, CFG)
    sizes = {
        fmt: len(encode_submission(compressed, window=1, uid=2, base=BASE, signer=KEY, cfg=CFG, fmt=fmt))
        for fmt in (FORMAT, FORMAT_V2)
    }
    assert 512 * 4096 * 4 / sizes[FORMAT_V2] >= 200.0, sizes
    assert max(sizes.values()) <= max_submission_bytes(spec, CFG)


def v2_with_stream(name: str, edit: Callable[[bytearray], None]) -> bytes:
    """A correctly signed v2 file whose `name` index stream was edited before signing."""
    tensors = dict(pack_tensors(compress(random_delta(0), None, CFG), CFG, FORMAT_V2))
    stream = bytearray(tensors[name].tobytes())
    edit(stream)
    tensors[name] = np.frombuffer(bytes(stream), dtype=np.uint8)
    return sign_tensors(tensors, FORMAT_V2)


def reason(data: bytes) -> str | None:
    result = decode_submission(data, SPEC, expect())
    assert (result.update is None) == (not result.verdict.ok)
    return result.verdict.reason


def _set(pos: int, value: int) -> Callable[[bytearray], None]:
    return lambda s: s.__setitem__(pos, value)


def test_the_unedited_stream_is_accepted() -> None:
    assert reason(v2_with_stream("embed.weight.idx", lambda s: None)) is None


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_set(0, 12), Reason.BAD_RICE_PARAMETER),  # k outside [0, 11]
        (_set(0, 255), Reason.BAD_RICE_PARAMETER),
        (lambda s: s.append(0), Reason.BAD_PADDING),  # a whole byte after the last unary code
        (lambda s: s.append(1), Reason.BAD_BITSTREAM),  # one unary code too many
        (lambda s: s.__delitem__(slice(-1, None)), Reason.BAD_BITSTREAM),  # codes missing
        (lambda s: s.__delitem__(slice(2, None)), Reason.BAD_BITSTREAM),  # ends inside the remainders
        (lambda s: s.__delitem__(slice(0, None)), Reason.BAD_SHAPE),  # empty: not even k
        (lambda s: s.extend(b"\0" * 4000), Reason.BAD_SHAPE),  # longer than the cap
    ],
)
def test_each_stream_check_has_its_reason(edit: Callable[[bytearray], None], expected: str) -> None:
    assert reason(v2_with_stream("embed.weight.idx", edit)) == expected


def test_gaps_that_overrun_a_chunk() -> None:
    # tiny.bias keeps all 3 of 3 values: k = 0 and the unary section is 0b111; 0b1011 puts index 3 outside
    assert reason(v2_with_stream("tiny.bias.idx", lambda s: s.__setitem__(1, 0b1011))) == (
        Reason.INDEX_OUT_OF_RANGE
    )

    # norm.weight keeps 64 of 64: insert a zero bit in the unary section, the last index becomes 64
    def shift(s: bytearray) -> None:
        bits = np.unpackbits(np.frombuffer(bytes(s[1:]), np.uint8), bitorder="little")
        s[1:] = np.packbits(np.concatenate([[0], bits]), bitorder="little").tobytes()

    assert reason(v2_with_stream("norm.weight.idx", shift)) == Reason.INDEX_OUT_OF_RANGE


def test_remainder_padding_must_be_zero() -> None:
    layout = ChunkLayout.of(64, CodecConfig(chunk=64, topk=2))  # the literal 03 2a 22: 6 remainder bits
    good = decode_indices(np.frombuffer(bytes.fromhex("032a22"), np.uint8), layout, 64)
    assert not isinstance(good, Verdict) and good.tolist() == [10, 40]
    bad = decode_indices(np.frombuffer(bytes.fromhex("03aa22"), np.uint8), layout, 64)
    assert isinstance(bad, Verdict) and bad.reason == Reason.BAD_PADDING


def test_a_file_cannot_be_relabelled_as_the_other_format() -> None:
    v2 = dict(load(make_file(0)))
    data = signed(v2)  # v2 tensors signed as gauntlet/1: the 12-bit schema refuses the stream length
    assert reason(data) == Reason.BAD_SHAPE
    t = dict(pack_tensors(compress(random_delta(0), None, CFG)))
    relabelled = signed(t, format=FORMAT_V2)  # signed over "gauntlet/1|…" but labelled gauntlet/2
    bad_stream = (Reason.BAD_RICE_PARAMETER, Reason.BAD_BITSTREAM, Reason.BAD_PADDING, Reason.BAD_SHAPE)
    assert reason(relabelled) in (Reason.BAD_SIGNATURE, *bad_stream)


def test_v2_is_accepted_without_a_signature_check_for_tools() -> None:
    assert decode_submission(make_file(3), SPEC, Expected(verify_signature=False)).verdict.ok
