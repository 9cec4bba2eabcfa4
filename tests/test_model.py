"""The LLaMA-style decoder: HF names, shapes, causality, GQA, rotary, seeded init."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from scoring.model import (
    Attention,
    ModelConfig,
    RopeScaling,
    autocast,
    build_model,
    count_parameters,
    param_spec,
    rope_frequencies,
    rotate,
    select_device,
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


SMALL = ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=32)


def test_config_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError):
        ModelConfig(dim=30, n_heads=4)
    with pytest.raises(ValueError):
        ModelConfig(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError):
        ModelConfig(vocab_size=0)
    with pytest.raises(ValueError):
        RopeScaling(factor=0.5)


def test_hf_parameter_names_and_shapes() -> None:
    spec = param_spec(build_model(SMALL, seed=0))
    assert list(spec)[:3] == [
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight",
    ]
    assert spec["model.layers.1.self_attn.k_proj.weight"] == (16, 32)  # 2 KV heads × head_dim 8
    assert spec["model.layers.1.mlp.down_proj.weight"] == (32, 48)
    assert spec["model.norm.weight"] == (32,)
    assert "lm_head.weight" not in spec  # tied
    untied = param_spec(build_model(replace(SMALL, tie_embeddings=False)))
    assert untied["lm_head.weight"] == (64, 32)


def test_parameter_counts_tiny_and_70b() -> None:
    # embed 64·32 + 2 layers × (q 32·32 + k,v 2·16·32 + o 32·32 + mlp 3·32·48 + norms 2·32) + final norm 32
    assert count_parameters(build_model(SMALL)) == 2048 + 2 * (1024 + 1024 + 1024 + 4608 + 64) + 32
    big = build_model(ModelConfig.llama_70b(), device="meta")
    assert count_parameters(big) == 70_553_706_496
    assert param_spec(big)["model.layers.79.self_attn.k_proj.weight"] == (1024, 8192)


def test_seeded_init_is_reproducible() -> None:
    a, b, c = build_model(SMALL, seed=3), build_model(SMALL, seed=3), build_model(SMALL, seed=4)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb)
        if not name.endswith("norm.weight"):
            assert not torch.equal(pa, pc)


def test_forward_is_causal() -> None:
    model = build_model(SMALL, seed=1)
    x = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    y = x.clone()
    y[:, 8:] = (y[:, 8:] + 1) % 64
    lx, ly = model(x), model(y)
    assert lx.shape == (2, 12, 64)
    assert torch.equal(lx[:, :8], ly[:, :8])
    assert not torch.allclose(lx[:, 8:], ly[:, 8:])


def test_grouped_query_attention_matches_repeated_kv() -> None:
    model = build_model(SMALL, seed=2)
    attn = model.model.layers[0].self_attn
    assert isinstance(attn, Attention)
    x = torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(1))
    cos, sin = model.rotary(5, x.device)
    with torch.no_grad():
        got = attn(x, cos, sin)
        q = rotate(attn.q_proj(x).view(1, 5, 4, 8).transpose(1, 2), cos, sin)
        k = rotate(attn.k_proj(x).view(1, 5, 2, 8).transpose(1, 2), cos, sin).repeat_interleave(2, dim=1)
        v = attn.v_proj(x).view(1, 5, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ref = attn.o_proj(ref.transpose(1, 2).reshape(1, 5, 32))
    assert torch.allclose(got, ref, atol=1e-6)


def test_rotary_frequencies_and_theta() -> None:
    cfg = ModelConfig(dim=16, n_heads=2, n_kv_heads=2, rope_theta=10000.0)  # head_dim 8
    assert torch.allclose(rope_frequencies(cfg), torch.tensor([1.0, 0.1, 0.01, 0.001]))
    scaled = ModelConfig(
        dim=16,
        n_heads=2,
        n_kv_heads=2,
        rope_scaling=RopeScaling(8.0, 1.0, 4.0, original_max_position_embeddings=64),
    )
    # wavelengths 2π·(1, 10, 100, 1000) against the band [64/4, 64/1]: 6.3 is kept, 62.8 is blended,
    # 628 and 6283 are divided by the factor 8
    f = rope_frequencies(scaled)
    assert torch.allclose(f[0], torch.tensor(1.0))
    assert 0.1 / 8 < float(f[1]) < 0.1
    assert torch.allclose(f[2:], torch.tensor([0.01 / 8, 0.001 / 8]))


def test_too_long_sequence_is_refused() -> None:
    with pytest.raises(ValueError):
        build_model(SMALL)(torch.zeros(1, 33, dtype=torch.int64))


def test_cpu_runs_plain_fp32() -> None:
    device = select_device("cpu")
    assert device == torch.device("cpu")
    assert select_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with autocast(device):
        logits = build_model(SMALL)(torch.zeros(1, 4, dtype=torch.int64))
    assert logits.dtype == torch.float32
