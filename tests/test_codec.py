"""Encoder/decoder round trips, bit packing literals, error feedback and the wire size."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.decoder import Expected, decode_submission
from scoring.encoder import compress, compress_to_sparse, encode_submission
from scoring.packing import pack2, pack12, unpack2, unpack12
from scoring.wire import ChunkLayout, CodecConfig, payload_bytes
from tests.codec_fixtures import BASE, CFG, KEY, SPEC, UID, WINDOW, expect, make_file, random_delta


def test_pack12_matches_the_spec_examples() -> None:
    assert pack12(np.array([1, 4095])).tobytes() == bytes.fromhex("01f0ff")
    assert pack12(np.array([0x123, 0xABC])).tobytes() == bytes.fromhex("23c1ab")
    assert pack12(np.array([5])).tobytes() == bytes([5, 0, 0])  # odd count padded with a zero index


def test_pack2_puts_the_first_code_in_the_lowest_bits() -> None:
    assert pack2(np.array([1, 2, 3, 0, 3])).tolist() == [0b00111001, 0b00000011]
    assert unpack2(pack2(np.array([3, 1, 0, 2]))).tolist() == [3, 1, 0, 2]


@given(st.lists(st.integers(0, 4095), min_size=0, max_size=300))
def test_pack12_round_trip(values: list[int]) -> None:
    out = unpack12(pack12(np.array(values, dtype=np.uint16)))
    assert out[: len(values)].tolist() == values
    assert len(out) - len(values) in (0, 1)


def test_decode_is_exactly_what_the_peer_compressed() -> None:
    delta = random_delta(1)
    expected = compress_to_sparse(delta, None, CFG)
    result = decode_submission(make_file(1), SPEC, expect())
    assert result.verdict.ok, result.verdict
    assert result.update is not None
    for name, shape in SPEC.items():
        got = result.update.params[name]
        assert got.shape == shape
        assert torch.equal(got.indices, expected[name].indices)
        assert torch.equal(got.values, expected[name].values)
        layout = ChunkLayout.of(int(np.prod(shape)), CFG)
        assert got.indices.numel() == layout.kept
        assert bool((got.indices[1:] > got.indices[:-1]).all())  # sorted and unique
    assert result.update.meta.hotkey == KEY.ss58_address


def test_kept_entries_are_the_largest_and_keep_their_sign() -> None:
    delta = random_delta(2)
    sparse = compress_to_sparse(delta, None, CFG)
    flat = delta["mlp.up_proj.weight"].reshape(-1)
    kept = sparse["mlp.up_proj.weight"]
    first_chunk = kept.indices[kept.indices < 4096]
    assert first_chunk.numel() == 64
    threshold = flat[:4096].abs().topk(64).values.min()
    assert bool((flat[first_chunk].abs() >= threshold).all())
    assert torch.equal(torch.sign(kept.values), torch.sign(flat[kept.indices]))


def test_dense_view_holds_values_only_at_kept_coordinates() -> None:
    sparse = compress_to_sparse(random_delta(3), None, CFG)["embed.weight"]
    dense = sparse.dense()
    assert dense.shape == (97, 64)
    assert int((dense != 0).sum()) == int((sparse.values != 0).sum())
    assert torch.equal(dense.reshape(-1)[sparse.indices], sparse.values)


def test_error_feedback_loses_nothing_when_beta_is_one() -> None:
    cfg = CodecConfig(error_feedback=1.0)
    ef: dict[str, torch.Tensor] = {}
    total_sent = {n: torch.zeros(s) for n, s in SPEC.items()}
    total_delta = {n: torch.zeros(s) for n, s in SPEC.items()}
    for seed in range(4):
        delta = random_delta(seed)
        for name, p in compress_to_sparse(delta, ef, cfg).items():
            total_sent[name] += p.dense()
            total_delta[name] += delta[name]
    for name in SPEC:
        torch.testing.assert_close(total_sent[name] + ef[name], total_delta[name], rtol=0, atol=1e-7)


def test_error_feedback_decays_the_residual() -> None:
    ef: dict[str, torch.Tensor] = {}
    d = random_delta(4)
    sent = compress_to_sparse(d, ef, CFG)
    residual = {n: d[n] - sent[n].dense() for n in SPEC}
    for n in SPEC:
        torch.testing.assert_close(ef[n], residual[n], rtol=0, atol=0)
    d2 = random_delta(5)
    before = {n: ef[n].clone() for n in SPEC}
    sent2 = compress_to_sparse(d2, ef, CFG)
    for n in SPEC:
        expected = before[n] * 0.95 + d2[n] - sent2[n].dense()
        torch.testing.assert_close(ef[n], expected, rtol=1e-6, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 70), min_size=1, max_size=3).map(tuple),
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([1e-6, 1e-3, 1.0, 20.0]),
)
def test_round_trip_for_random_shapes(shape: tuple[int, ...], seed: int, scale: float) -> None:
    spec = {"w": shape, "chunky": (4096 + shape[0],)}
    g = torch.Generator().manual_seed(seed)
    delta = {n: torch.randn(s, generator=g) * scale for n, s in spec.items()}
    compressed = compress(delta, None, CFG)
    data = encode_submission(compressed, window=1, uid=2, base=BASE, signer=KEY, cfg=CFG)
    result = decode_submission(data, spec, Expected(window=1, uid=2, hotkey=KEY.ss58_address, base=BASE))
    assert result.verdict.ok, result.verdict
    assert result.update is not None
    expected = compress_to_sparse(delta, None, CFG)
    for n in spec:
        assert torch.equal(result.update.params[n].values, expected[n].values)
        assert torch.equal(result.update.params[n].indices, expected[n].indices)
        # quantization keeps the scale of the largest entries within a factor of two
        top = delta[n].abs().max()
        assert float(result.update.params[n].values.abs().max()) <= 2 * float(top) + 1e-12


def test_bytes_on_the_wire_match_the_format_and_beat_143x() -> None:
    spec = {"w": (512, 4096)}  # 512 full chunks
    data = encode_submission(
        compress(random_delta(0, spec), None, CFG), window=WINDOW, uid=UID, base=BASE, signer=KEY, cfg=CFG
    )
    assert payload_bytes(spec, CFG) == 512 * 114 + 16
    ratio = 512 * 4096 * 4 / len(data)
    assert ratio > 140.0, ratio  # the header is a fixed cost; 143.7x in the limit
