"""Every kind of bad input ends in its stable reason code, never an exception."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable

import numpy as np
import pytest
from safetensors.numpy import save

from scoring.decoder import REREAD, Expected, decode_submission
from scoring.encoder import compress, pack_tensors
from scoring.signing import dev_keypair, sign_hex
from scoring.types import Reason
from scoring.wire import FORMAT, payload_digest, signed_message
from tests.codec_fixtures import BASE, CFG, KEY, SPEC, UID, WINDOW, expect, make_file, random_delta

Tensors = dict[str, np.ndarray]


def signed(tensors: Tensors, **meta_overrides: str | None) -> bytes:
    """A file with the given tensors, correctly signed unless the overrides say otherwise."""
    meta = {
        "format": FORMAT, "window": str(WINDOW), "uid": str(UID), "hotkey": KEY.ss58_address,
        "base": BASE, "chunk": "4096", "topk": "64",
    }  # fmt: skip
    meta["signature"] = sign_hex(
        KEY, signed_message(WINDOW, UID, KEY.ss58_address, BASE, payload_digest(tensors))
    )
    for k, v in meta_overrides.items():
        if v is None:
            meta.pop(k)
        else:
            meta[k] = v
    return save(tensors, metadata=meta)


def good_tensors() -> Tensors:
    return dict(pack_tensors(compress(random_delta(0), None, CFG)))


def reason_of(data: bytes, exp: Expected | None = None) -> str | None:
    result = decode_submission(data, SPEC, exp or expect())
    assert (result.update is None) == (not result.verdict.ok)
    return result.verdict.reason


def with_tensor(name: str, fn: Callable[[np.ndarray], np.ndarray]) -> bytes:
    t = good_tensors()
    t[name] = fn(t[name].copy())
    return signed(t)


def test_the_unmodified_file_is_accepted() -> None:
    assert reason_of(signed(good_tensors())) is None


def test_container_failures() -> None:
    good = make_file()
    assert reason_of(good[:-7]) == Reason.NOT_SAFETENSORS  # truncated
    assert reason_of(good[:5]) == Reason.NOT_SAFETENSORS
    assert reason_of(b"PK\x03\x04 this is a zip file, not safetensors") == Reason.BAD_HEADER
    assert reason_of(struct.pack("<Q", 6) + b"{nope}") == Reason.NOT_SAFETENSORS
    assert reason_of(struct.pack("<Q", 4) + b"[12]") == Reason.NOT_SAFETENSORS
    assert reason_of(struct.pack("<Q", 1 << 40) + b"{}") == Reason.BAD_HEADER  # header above the cap
    assert reason_of(b"x" * (10 << 20)) == Reason.TOO_LARGE


def _rewrite_header(data: bytes, edit: Callable[[dict[str, object]], None]) -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + n :]


def test_header_that_lies_about_offsets_or_dtypes() -> None:
    good = make_file()

    def shift_offsets(h: dict[str, object]) -> None:
        entry = h["norm.weight.lut"]
        assert isinstance(entry, dict)
        entry["data_offsets"] = [entry["data_offsets"][0] + 3, entry["data_offsets"][1] + 3]

    def claim_f64(h: dict[str, object]) -> None:
        entry = h["norm.weight.lut"]
        assert isinstance(entry, dict)
        entry["dtype"], entry["shape"] = "F64", [2]

    def claim_i8(h: dict[str, object]) -> None:
        entry = h["tiny.bias.idx"]
        assert isinstance(entry, dict)
        entry["dtype"] = "I8"

    assert reason_of(_rewrite_header(good, shift_offsets)) == Reason.NOT_SAFETENSORS
    assert reason_of(_rewrite_header(good, claim_f64)) == Reason.BAD_DTYPE
    assert reason_of(_rewrite_header(good, claim_i8)) == Reason.BAD_DTYPE


def test_schema_failures() -> None:
    t = good_tensors()
    del t["norm.weight.scale"]
    assert reason_of(signed(t)) == Reason.MISSING_TENSOR
    t = good_tensors()
    t["evil.weight.idx"] = np.zeros(3, np.uint8)
    assert reason_of(signed(t)) == Reason.EXTRA_TENSOR
    assert reason_of(with_tensor("embed.weight.scale", lambda a: a.astype(np.float32))) == Reason.BAD_DTYPE
    assert reason_of(with_tensor("embed.weight.idx", lambda a: a[:-3])) == Reason.BAD_SHAPE
    assert reason_of(with_tensor("embed.weight.lut", lambda a: a.reshape(2, 2))) == Reason.BAD_SHAPE


def test_padding_must_be_zero() -> None:
    # tiny.bias keeps 3 entries: one padding index (in the last 12 bits) and one padding code.
    def poison_idx(a: np.ndarray) -> np.ndarray:
        a[-1] |= 0x10
        return a

    def poison_code(a: np.ndarray) -> np.ndarray:
        a[-1] |= 0b11000000
        return a

    assert reason_of(with_tensor("tiny.bias.idx", poison_idx)) == Reason.BAD_PADDING
    assert reason_of(with_tensor("tiny.bias.val", poison_code)) == Reason.BAD_PADDING


def test_index_content_failures() -> None:
    def out_of_range(a: np.ndarray) -> np.ndarray:  # tiny.bias has 3 values: index 3 is outside
        a[0] = 3
        return a

    def repeat_first(a: np.ndarray) -> np.ndarray:  # make entries 0 and 1 of chunk 0 equal
        first = int(a[0]) | ((int(a[1]) & 0x0F) << 8)
        a[1] = (a[1] & 0x0F) | ((first & 0x0F) << 4)
        a[2] = first >> 4
        return a

    def decreasing(a: np.ndarray) -> np.ndarray:  # swap the first two 12-bit indices
        first = int(a[0]) | ((int(a[1]) & 0x0F) << 8)
        second = (int(a[1]) >> 4) | (int(a[2]) << 4)
        a[0], a[1], a[2] = second & 0xFF, (second >> 8) | ((first & 0x0F) << 4), first >> 4
        return a

    assert reason_of(with_tensor("tiny.bias.idx", out_of_range)) == Reason.INDEX_OUT_OF_RANGE
    assert reason_of(with_tensor("embed.weight.idx", repeat_first)) == Reason.INDEX_NOT_INCREASING
    assert reason_of(with_tensor("embed.weight.idx", decreasing)) == Reason.INDEX_NOT_INCREASING


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (np.nan, Reason.NON_FINITE),
        (np.inf, Reason.NON_FINITE),
        (-0.5, Reason.BAD_SCALE),
        (60000.0, Reason.BAD_SCALE),
    ],
)
def test_bad_scales(value: float, reason: str) -> None:
    def poison(a: np.ndarray) -> np.ndarray:
        a[0] = value
        return a

    assert reason_of(with_tensor("mlp.up_proj.weight.scale", poison)) == reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (np.nan, Reason.NON_FINITE),
        (-np.inf, Reason.NON_FINITE),
        (1e9, Reason.BAD_LUT),
        (-1e30, Reason.BAD_LUT),
    ],
)
def test_bad_codebooks(value: float, reason: str) -> None:
    def poison(a: np.ndarray) -> np.ndarray:
        a[2] = value
        return a

    assert reason_of(with_tensor("attn.q_proj.weight.lut", poison)) == reason


@pytest.mark.parametrize("key", ["window", "uid", "hotkey", "base", "signature", "format", "chunk", "topk"])
def test_missing_metadata(key: str) -> None:
    assert reason_of(signed(good_tensors(), **{key: None})) == Reason.BAD_METADATA


@pytest.mark.parametrize(
    ("key", "value"), [("window", "seven"), ("uid", "-3"), ("chunk", "2048"), ("format", "x/2")]
)
def test_bad_metadata_values(key: str, value: str) -> None:
    assert reason_of(signed(good_tensors(), **{key: value})) == Reason.BAD_METADATA


@pytest.mark.parametrize("key", ["hotkey", "base", "signature", "format"])
@pytest.mark.parametrize(
    "value",
    ["\x00\x00\x00\x00ab", "ab\u00e9", "a\nb", "\ud800"],
    ids=["nul", "non-ascii", "newline", "surrogate"],
)
def test_metadata_that_is_not_printable_ascii_is_bad_metadata(key: str, value: str) -> None:
    """A NUL in a recorded detail fails a PostgreSQL commit, a lone surrogate the signed message's
    encoding: both are refused as metadata before either is reached. safetensors cannot write a lone
    surrogate, so the value goes into the header's JSON as an escape, in a placeholder's place."""
    placeholder = "Q" * 6
    data = signed(good_tensors(), **{key: placeholder if value == "\ud800" else value})
    if value == "\ud800":
        assert data.count(f'"{placeholder}"'.encode()) == 1
        data = data.replace(f'"{placeholder}"'.encode(), b'"\\ud800"')
    assert reason_of(data) == Reason.BAD_METADATA


def test_identity_failures() -> None:
    good = make_file()
    assert reason_of(good, Expected(window=WINDOW + 1)) == Reason.WRONG_WINDOW
    other = dev_keypair("//someone-else").ss58_address
    assert reason_of(good, Expected(hotkey=other)) == Reason.WRONG_HOTKEY
    assert reason_of(good, Expected(uid=UID + 1)) == Reason.WRONG_UID
    assert reason_of(good, Expected(base="cd" * 32)) == Reason.STALE_BASE


def test_signature_failures() -> None:
    t = good_tensors()
    assert reason_of(signed(t, signature="00" * 64)) == Reason.BAD_SIGNATURE
    # base58 of an ss58 address's length, but not an address (its checksum fails): not verifiable
    assert reason_of(signed(t, hotkey="5" * 48), Expected()) == Reason.BAD_SIGNATURE
    # a replay: the same signed bytes re-labelled for another window no longer verify
    assert reason_of(signed(t, window=str(WINDOW + 1)), Expected(window=WINDOW + 1)) == Reason.BAD_SIGNATURE
    # re-attribution: another hotkey claims the bytes
    other = dev_keypair("//copycat").ss58_address
    assert reason_of(signed(t, hotkey=other), Expected()) == Reason.BAD_SIGNATURE
    # tampering with any tensor after signing breaks the digest
    data = bytearray(make_file())
    data[-1] ^= 0x01
    assert reason_of(bytes(data)) in (Reason.BAD_SIGNATURE,)


def test_metadata_fields_have_one_spelling() -> None:
    """docs/wire-format.md §3: a field outside its form is `bad_metadata`. `bytes.fromhex` took
    upper-case and spaced hex, so one signed update had several accepted encodings, and an ss58
    decoder handed a megabyte "hotkey" took minutes (the header allows 1 MiB)."""
    t = good_tensors()
    sig = signed(t)
    good = json.loads(sig[8 : 8 + int.from_bytes(sig[:8], "little")])["__metadata__"]["signature"]
    for bad in (
        good.upper(),
        " ".join(good[i : i + 2] for i in range(0, 128, 2)),
        good + " ",
        "0x" + good,
        "",
        "not hex",
    ):
        assert reason_of(signed(t, signature=bad)) == Reason.BAD_METADATA, bad[:20]
    for hotkey in ("not-an-ss58-address", "xyz", "", "0x" + "11" * 32, "5" + "z" * 200_000):
        assert reason_of(signed(t, hotkey=hotkey), Expected()) == Reason.BAD_METADATA, hotkey[:20]
    for base in ("AB" * 32, "ab", "zz" * 32, ""):
        assert reason_of(signed(t, base=base), Expected()) == Reason.BAD_METADATA, base
        assert reason_of(signed(t, base=base), REREAD) == Reason.BAD_METADATA, base


def _with_raw_entry(data: bytes, name: str, raw_entry: str) -> bytes:
    """Add one header entry spelled as raw JSON (Python cannot even print some hostile integers)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header[name] = "@@"
    raw = json.dumps(header).replace('"@@"', raw_entry).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + n :]


def _entry_at_end(data: bytes, shape: str) -> str:
    end = len(data) - 8 - int.from_bytes(data[:8], "little")
    return f'{{"dtype": "U8", "shape": {shape}, "data_offsets": [{end}, {end}]}}'


@pytest.mark.parametrize(
    "shape",
    [
        "[" + "9" * 5000 + "]",  # an integer thousands of digits long
        "[" + ", ".join(["1"] * 40) + ", 0]",  # dozens of dimensions
        f"[0, {2**64 - 1}]",  # a product that overflows int64 (but is 0)
        f"[{2**64 - 1}, 0]",
        "[-1]",
        "[1.5]",
        "[true]",
    ],
)
@pytest.mark.parametrize("name", ["norm.weight.extra", "tiny.bias.zzz", "norm.weight.lut"])
def test_hostile_shapes_are_verdicts_not_exceptions(shape: str, name: str) -> None:
    good = make_file()
    data = _with_raw_entry(good, name, _entry_at_end(good, shape))
    assert reason_of(data) in (Reason.BAD_SHAPE, Reason.NOT_SAFETENSORS, Reason.EXTRA_TENSOR)


def test_hostile_shape_of_an_expected_tensor() -> None:
    def many_dims(h: dict[str, object]) -> None:
        entry = h["norm.weight.lut"]
        assert isinstance(entry, dict)
        entry["shape"] = [1] * 40 + [4]

    assert reason_of(_rewrite_header(make_file(), many_dims)) == Reason.BAD_SHAPE


def test_thousands_of_empty_tensors_are_refused_before_hashing_or_verifying() -> None:
    """A 1 MiB header of unknown empty tensors: the schema refuses it before the signature is checked."""
    good = make_file()
    end = len(good) - 8 - int.from_bytes(good[:8], "little")

    def flood(h: dict[str, object]) -> None:
        for i in range(15_000):
            h[f"x{i}"] = {"dtype": "U8", "shape": [0], "data_offsets": [end, end]}
        h["__metadata__"] = {**h["__metadata__"], "signature": "00" * 64}  # type: ignore[dict-item]

    data = _rewrite_header(good, flood)
    assert len(data) < CFG.max_header_bytes
    start = time.perf_counter()
    assert reason_of(data) == Reason.EXTRA_TENSOR  # not bad_signature: names are checked first
    assert time.perf_counter() - start < 2.0  # 0.8 s on an idle machine before; about 0.05 s now


def test_duplicate_header_keys_are_refused() -> None:
    good = make_file()
    (n,) = struct.unpack("<Q", good[:8])
    header = good[8 : 8 + n].rstrip()
    dup = header[:-1] + b', "__metadata__": {}}'
    dup += b" " * ((8 - len(dup) % 8) % 8)
    assert reason_of(struct.pack("<Q", len(dup)) + dup + good[8 + n :]) == Reason.NOT_SAFETENSORS


def test_an_unexpected_error_inside_the_decoder_is_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> str:
        raise OverflowError("a bug we did not foresee")

    monkeypatch.setattr("scoring.decoder.payload_digest", broken)
    result = decode_submission(make_file(), SPEC, expect())
    assert result.verdict.reason == Reason.BAD_HEADER
    assert "OverflowError" in result.verdict.detail


def test_overlapping_header_parses_share_one_pause_of_the_collector() -> None:
    """The header parse pauses the cyclic collector. Two threads' pauses overlapping used to read
    and set it in two steps each: one could read "disabled" from the other's pause and restore that,
    leaving the collector off for the whole process (the audit reproduced it with three decoding
    threads), and the first to finish re-enabled it under the other's parse."""
    import gc

    from scoring.container import _collector_paused

    assert gc.isenabled()
    first, second = _collector_paused(), _collector_paused()
    try:
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert not gc.isenabled()  # the second parse is still running
        second.__exit__(None, None, None)
        assert gc.isenabled()  # restored to what it was before the first pause
        gc.disable()
        with _collector_paused():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()


def _with_header(data: bytes, edit: Callable[[str], str]) -> bytes:
    """`data` with its JSON header rewritten by `edit` (the signature untouched)."""
    (n,) = struct.unpack("<Q", data[:8])
    raw = edit(data[8 : 8 + n].decode()).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + n :]


def _at_depth(frames: int, work: Callable[[], str | None]) -> str | None:
    return work() if frames == 0 else _at_depth(frames - 1, work)


def test_a_deeply_nested_header_has_one_verdict_at_any_stack_depth() -> None:
    """The parser's recursion budget is the caller's too: a header nested 700 levels in an ignored
    metadata key was accepted on a shallow stack and not_safetensors on a deep one (a file judged
    on a worker thread, then re-read by the outer step, could stop decoding)."""
    deep = "[" * 700 + "0" + "]" * 700
    data = _with_header(
        make_file(0), lambda h: h.replace('"__metadata__":{', f'"__metadata__":{{"note":{deep},', 1)
    )
    shallow, nested = reason_of(data), _at_depth(400, lambda: reason_of(data))
    assert shallow == nested == Reason.NOT_SAFETENSORS


def test_metadata_values_are_strings_and_numbers_have_one_spelling() -> None:
    """Both passed with the original signature: a non-string value (safetensors itself refuses it)
    and window "07" for 7, another accepted encoding of one signed file."""
    good = make_file(0)
    assert reason_of(good) is None
    as_list = _with_header(good, lambda h: h.replace('"__metadata__":{', '"__metadata__":{"note":[1,2],', 1))
    assert reason_of(as_list) == Reason.BAD_METADATA
    for key, value in (("window", WINDOW), ("uid", UID), ("topk", 64)):
        respelled = _with_header(
            good, lambda h, k=key, v=value: h.replace(f'"{k}":"{v}"', f'"{k}":"0{v}"', 1)
        )
        assert respelled != good and reason_of(respelled) == Reason.BAD_METADATA, key


def test_a_header_of_unclosed_escaped_quotes_is_refused_in_one_pass() -> None:
    """The nesting count's string pattern failed on an unclosed string and was retried at every
    later quote: quadratic, holding the GIL (256 KB took 141 s, the 1 MiB cap about 45 minutes,
    the whole validator frozen). Every attempt matches now, so a pass is linear."""
    raw = b'{"' + b'a\\"' * 340_000
    raw += b" " * (-len(raw) % 8)
    data = struct.pack("<Q", len(raw)) + raw
    started = time.perf_counter()
    assert reason_of(data) == Reason.NOT_SAFETENSORS
    assert time.perf_counter() - started < 10.0  # quadratic, this was tens of minutes
