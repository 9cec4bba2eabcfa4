"""HF-layout checkpoints: round trips (single file and sharded), tied exports, refusals."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from scoring.checkpoint import INDEX_NAME, config_from_hf, config_to_hf, load_checkpoint, save_checkpoint
from scoring.model import ModelConfig, RopeScaling, build_model


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


SMALL = ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=32)
TOKENS = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))


def test_single_file_round_trip_gives_identical_logits(tmp_path: Path) -> None:
    model = build_model(SMALL, seed=5)
    files = save_checkpoint(model, tmp_path)
    assert [f.name for f in files] == ["model.safetensors"]
    loaded = load_checkpoint(tmp_path)
    assert loaded.cfg == SMALL
    with torch.no_grad():
        assert torch.equal(loaded(TOKENS), model(TOKENS))


def test_sharded_round_trip_writes_an_index(tmp_path: Path) -> None:
    cfg = replace(SMALL, tie_embeddings=False, rope_theta=500000.0)
    model = build_model(cfg, seed=6)
    files = save_checkpoint(model, tmp_path, max_shard_bytes=20_000)
    assert len(files) > 2
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert set(index["weight_map"]) == {n for n, _ in model.named_parameters()}
    hf = json.loads((tmp_path / "config.json").read_text())
    assert (hf["num_key_value_heads"], hf["rope_theta"], hf["tie_word_embeddings"]) == (2, 500000.0, False)
    loaded = load_checkpoint(tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(TOKENS), model(TOKENS))


def test_tied_export_with_duplicate_lm_head_and_inv_freq_loads(tmp_path: Path) -> None:
    model = build_model(SMALL, seed=7)
    tensors = {n: p.detach().clone() for n, p in model.named_parameters()}
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(SMALL)))
    with torch.no_grad():
        assert torch.equal(load_checkpoint(tmp_path)(TOKENS), model(TOKENS))


def test_missing_tensor_is_refused(tmp_path: Path) -> None:
    model = build_model(SMALL, seed=8)
    tensors = {n: p.detach().clone() for n, p in model.named_parameters() if n != "model.norm.weight"}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(SMALL)))
    with pytest.raises(ValueError, match=r"model\.norm\.weight"):
        load_checkpoint(tmp_path)


def test_llama3_config_maps_including_rope_scaling() -> None:
    hf = {
        "vocab_size": 128256,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    cfg = config_from_hf(hf)
    assert (cfg.n_layers, cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.tie_embeddings) == (
        80,
        8192,
        64,
        8,
        False,
    )
    assert cfg.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)
    assert config_from_hf(config_to_hf(cfg)) == cfg
    with pytest.raises(ValueError):
        config_from_hf({**hf, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError):
        config_from_hf({**hf, "attention_bias": True})


def test_load_into_bf16_casts_every_parameter(tmp_path: Path) -> None:
    model = build_model(SMALL, seed=9)
    save_checkpoint(model, tmp_path)
    loaded = load_checkpoint(tmp_path, dtype=torch.bfloat16)
    for (name, p), q in zip(loaded.named_parameters(), model.parameters(), strict=True):
        assert p.dtype == torch.bfloat16, name
        assert torch.equal(p, q.to(torch.bfloat16))
    assert loaded.inv_freq.dtype == torch.float32  # rotary frequencies stay fp32
