"""The payload digest names the update, not its encoding: every format and Rice k hash alike, so a
replay re-encoded in the other format or with another k is still caught (docs/wire-format.md §7)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from safetensors.numpy import load

from scoring.decoder import Expected, decode_submission, submission_digest
from scoring.encoder import compress, encode_submission
from scoring.packing import pack12
from scoring.ranking import Status
from scoring.rice import MAX_RICE, decode_indices, encode_indices, stream_cap
from scoring.signing import Signer, dev_keypair
from scoring.types import Reason, SparseUpdate, Verdict
from scoring.wire import FORMAT, FORMAT_V2, ChunkLayout, CodecConfig, numel_of
from tests.codec_fixtures import BASE, CFG, KEY, SPEC, UID, WINDOW, random_delta, sign_tensors
from validator.round.check_config import CheckConfig
from validator.round.checking import Standing, check_window, convict_copies, file_judge
from validator.round.outcomes import PeerTarget, PeerWindow
from validator.round.window import WindowSeed
from validator.stores.objstore import FetchResult

OTHER = dev_keypair("//gauntlet-test-replayer")
Tensors = dict[str, np.ndarray]


def with_k(data: bytes, pick_k: int | None) -> Tensors:
    """The tensors of `data` with every index set re-encoded as `gauntlet/2` with Rice parameter
    `pick_k` (None: the encoder's choice), or as `gauntlet/1` 12-bit fields when the file is v2
    and `pick_k` is -1. The values, scales and codebooks are untouched."""
    decoded = decode_submission(data, SPEC, Expected(verify_signature=False))
    assert decoded.update is not None
    tensors = dict(load(data))
    for name, shape in SPEC.items():
        layout = ChunkLayout.of(numel_of(shape), CFG)
        idx = _positions(decoded.update, name)
        if pick_k == -1:
            tensors[f"{name}.idx"] = pack12(idx)
            continue
        stream = encode_indices(idx, layout, pick_k)
        assert stream.size <= stream_cap(layout)  # a valid encoding, not a rejected one
        tensors[f"{name}.idx"] = stream
    return tensors


def _positions(update: SparseUpdate, name: str) -> np.ndarray:
    """In-chunk positions back from the decoded flat indices."""
    return (update.params[name].indices.numpy() % CFG.chunk).astype(np.uint16)


def decoded(data: bytes, signer: Signer = KEY, window: int = WINDOW) -> SparseUpdate:
    hotkey = signer.ss58_address
    result = decode_submission(data, SPEC, Expected(window=window, uid=UID, hotkey=hotkey, base=BASE))
    assert result.verdict.ok, result.verdict
    assert result.update is not None
    return result.update


def test_one_update_has_one_digest_in_every_encoding() -> None:
    compressed = compress(random_delta(0), None, CFG)
    v1 = encode_submission(compressed, window=WINDOW, uid=UID, base=BASE, signer=KEY, cfg=CFG, fmt=FORMAT)
    v2 = encode_submission(compressed, window=WINDOW, uid=UID, base=BASE, signer=KEY, cfg=CFG, fmt=FORMAT_V2)
    chosen = {n: int(t[0]) for n, t in load(v2).items() if n.endswith(".idx")}
    assert any(k != MAX_RICE for k in chosen.values())  # so k = 11 really is another k
    files = {
        "v1": (v1, KEY),
        "v2, the encoder's k": (v2, KEY),
        "v2, k = 11, same key": (sign_tensors(with_k(v1, MAX_RICE), FORMAT_V2), KEY),
        "v2, k = 11, re-signed": (sign_tensors(with_k(v2, MAX_RICE), FORMAT_V2, signer=OTHER), OTHER),
        "v1 from v2, re-signed": (sign_tensors(with_k(v2, -1), FORMAT, signer=OTHER), OTHER),
    }
    updates = {label: decoded(data, signer) for label, (data, signer) in files.items()}
    assert len({u.digest for u in updates.values()}) == 1, {k: u.digest for k, u in updates.items()}
    for u in updates.values():  # and it is one update
        for name in SPEC:
            assert torch.equal(u.params[name].indices, updates["v1"].params[name].indices)
            assert torch.equal(u.params[name].values, updates["v1"].params[name].values)


def test_every_valid_k_of_a_stream_decodes_to_the_same_positions() -> None:
    """Why the digest cannot be over the stream: one index set, several valid streams."""
    layout = ChunkLayout.of(numel_of(SPEC["mlp.up_proj.weight"]), CFG)
    update = decoded(encode_submission(compress(random_delta(1), None, CFG), window=WINDOW, uid=UID,
                                       base=BASE, signer=KEY, cfg=CFG))  # fmt: skip
    idx = _positions(update, "mlp.up_proj.weight")
    streams = [encode_indices(idx, layout, k) for k in range(MAX_RICE + 1)]
    valid = [s for s in streams if s.size <= stream_cap(layout)]
    assert len(valid) >= 3
    for s in valid:
        out = decode_indices(s, layout, CFG.chunk)
        assert not isinstance(out, Verdict) and np.array_equal(out, idx)


class DigestLedger:
    """A fake of the ledger's payload-digest memory: which digests were accepted in which window."""

    def __init__(self) -> None:
        self.windows: dict[str, int] = {}

    def record(self, peers: list[PeerWindow], window: int) -> None:
        for p in peers:
            if p.valid and p.update is not None:  # the ledger stores both digests of a submission
                for digest in (p.update.digest, p.update.decoded):
                    if digest is not None:
                        self.windows.setdefault(digest, window)

    def seen_before(self, digests: list[str], window: int) -> set[str]:
        return {d for d in digests if self.windows.get(d, window) < window}


def sighted(hotkey: str, data: bytes, first_seen: float) -> FetchResult:
    return FetchResult(hotkey, "ok", data=data, first_seen=first_seen, seen_resolution_s=1.0)


def check(files: Mapping[str, bytes], window: int, ledger: DigestLedger) -> dict[str, PeerWindow]:
    peers = [  # uploads seen in the order given, a minute apart
        PeerWindow(PeerTarget(UID, hotkey, None), Status.OK, fetch=sighted(hotkey, data, 60.0 * i))
        for i, (hotkey, data) in enumerate(files.items())
    ]
    archive = lambda data: hashlib.sha256(data).hexdigest()  # noqa: E731
    judge = file_judge(window=window, base=BASE, spec=SPEC, cfg=CheckConfig(), archive=archive)
    seen_before = lambda digests: ledger.seen_before(digests, window)  # noqa: E731
    # KEY has proven its training: only then does a first upload make a later one the offender
    standing = Standing(proven=frozenset({KEY.ss58_address}))
    checked, copies = check_window(peers, judge, CheckConfig(), seen_before, WindowSeed("0" * 64), standing)
    ledger.record(checked, window)
    # the upload order names a suspect; its own pages convict it after the evaluation: here they read
    # t = 0 (an update trained on somebody else's pages) and the first uploader's 3
    read = {p.hotkey: 0.0 for p in checked} | {KEY.ss58_address: 3.0}
    convicted, _ = convict_copies(checked, copies, read, {})
    return {p.hotkey: p for p in convicted}


@pytest.mark.parametrize(
    ("first", "again", "again_k"),
    [(FORMAT_V2, FORMAT, -1), (FORMAT, FORMAT_V2, MAX_RICE), (FORMAT_V2, FORMAT_V2, MAX_RICE)],
)
def test_a_replay_re_encoded_for_the_next_window_is_a_duplicate(first: str, again: str, again_k: int) -> None:
    ledger = DigestLedger()
    original = encode_submission(compress(random_delta(0), None, CFG), window=WINDOW, uid=UID, base=BASE,
                                 signer=KEY, cfg=CFG, fmt=first)  # fmt: skip
    assert check({KEY.ss58_address: original}, WINDOW, ledger)[KEY.ss58_address].valid
    replay = sign_tensors(with_k(original, again_k), again, signer=OTHER, window=WINDOW + 1)
    fresh = encode_submission(compress(random_delta(5), None, CFG), window=WINDOW + 1, uid=UID, base=BASE,
                              signer=KEY, cfg=CFG, fmt=first)  # fmt: skip
    out = check({OTHER.ss58_address: replay, KEY.ss58_address: fresh}, WINDOW + 1, ledger)
    assert out[KEY.ss58_address].valid
    assert (out[OTHER.ss58_address].status, out[OTHER.ss58_address].reason) == (
        "invalid",
        Reason.DUPLICATE_PAYLOAD,
    )


def test_the_same_update_in_the_other_format_in_one_window_is_a_duplicate() -> None:
    original = encode_submission(compress(random_delta(0), None, CFG), window=WINDOW, uid=UID, base=BASE,
                                 signer=KEY, cfg=CFG, fmt=FORMAT_V2)  # fmt: skip
    again = sign_tensors(with_k(original, -1), FORMAT, signer=OTHER)
    out = check({KEY.ss58_address: original, OTHER.ss58_address: again}, WINDOW, DigestLedger())
    assert out[KEY.ss58_address].valid
    assert (out[OTHER.ss58_address].status, out[OTHER.ss58_address].reason) == (
        "invalid",
        Reason.DUPLICATE_PAYLOAD,
    )


def _digest_as_documented(tensors: Mapping[str, bytes], dtypes: Mapping[str, tuple[str, int]]) -> str:
    """An independent reading of docs/wire-format.md §7 over canonical tensors given as raw bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        dtype, length = dtypes[name]
        for item in (name.encode(), dtype.encode(), str(length).encode(), tensors[name]):
            h.update(item + b"\0")
    return h.hexdigest()


def test_the_documented_example_digest() -> None:
    cfg = CodecConfig(chunk=16, topk=4)
    spec = {"w": (16,)}
    val, scale, lut = bytes([0b11100100]), np.array([1.0], np.float16), np.array([-2, -1, 1, 2], np.float32)
    common: Tensors = {"w.val": np.frombuffer(val, np.uint8), "w.scale": scale, "w.lut": lut}
    v1 = common | {"w.idx": np.frombuffer(bytes.fromhex("01200007f000"), np.uint8)}
    v2 = common | {"w.idx": np.frombuffer(bytes.fromhex("008680"), np.uint8)}
    raw = {
        "w.idx": bytes.fromhex("01200007f000"),
        "w.val": val,
        "w.scale": scale.tobytes(),
        "w.lut": lut.tobytes(),
    }
    kinds = {"w.idx": ("U8", 6), "w.val": ("U8", 1), "w.scale": ("F16", 1), "w.lut": ("F32", 4)}
    expected = _digest_as_documented(raw, kinds)
    assert submission_digest(v1, spec, cfg, FORMAT) == expected
    assert submission_digest(v2, spec, cfg, FORMAT_V2) == expected
