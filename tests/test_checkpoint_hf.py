"""Checkpoints written and read by the `transformers` library itself (tiny random models, offline).

Both directions: a `LlamaForCausalLM` saved with `save_pretrained` loads into our decoder with the
same logits, and a checkpoint we save loads into `LlamaForCausalLM.from_pretrained` with the same
logits. transformers >= 5 writes rope settings in a `rope_parameters` block, so a reader of only
the legacy keys would load these silently wrong: the non-default theta and llama3 cases catch that.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from scoring.checkpoint import INDEX_NAME, config_from_hf, load_checkpoint, save_checkpoint  # noqa: E402
from scoring.model import LlamaModel, ModelConfig, RopeScaling, build_model  # noqa: E402

TOLERANCE = 1e-4
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small, so that the tiny head's frequencies fall in all three llama3 bands (scaled, smoothed, kept).
    "original_max_position_embeddings": 16,
}


SHAPE = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 56,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


@dataclass(frozen=True)
class Case:
    name: str
    hf: dict[str, Any] = field(default_factory=dict)
    shard: str | None = None  # max_shard_size for save_pretrained / save_checkpoint


CASES = [
    Case("gqa", {"num_attention_heads": 4, "num_key_value_heads": 2}),
    Case("tied", {"tie_word_embeddings": True}),
    Case("llama3", {"rope_theta": 500000.0, "rope_scaling": LLAMA3}),
    Case("theta", {"rope_theta": 123456.0}),
    Case("sharded", {"num_key_value_heads": 1, "rope_theta": 40000.0}, shard="20KB"),
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Nothing may reach the network: every model here is built from a local folder.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    torch.set_num_threads(1)
    yield


def hf_config(extra: dict[str, Any]) -> Any:
    base: dict[str, Any] = {
        **SHAPE,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    }
    # A deep copy: LlamaConfig writes into the dicts it is given (it moved rope_theta into ours).
    return transformers.LlamaConfig(**copy.deepcopy({**base, **extra}))


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights large enough that logits are O(1), norms not all ones: a wrong rope or a swapped
    tensor then moves the logits far beyond the tolerance."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.2 * noise)


def tokens(vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (2, 48), generator=torch.Generator().manual_seed(0))


def their_logits(model: Any, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(x).logits
    return out


def our_logits(model: LlamaModel, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_theirs_to_ours(case: Case, tmp_path: Path) -> None:
    theirs = transformers.LlamaForCausalLM(hf_config(case.hf)).eval()
    randomize(theirs, seed=1)
    theirs.save_pretrained(tmp_path, max_shard_size=case.shard or "1GB")
    written = json.loads((tmp_path / "config.json").read_text())
    if case.hf.get("rope_theta") is not None:
        assert "rope_parameters" in written  # the layout the legacy-only reader got wrong
    assert (tmp_path / INDEX_NAME).exists() == (case.shard is not None)
    ours = load_checkpoint(tmp_path)
    x = tokens(ours.cfg.vocab_size)
    expected = their_logits(theirs, x)
    assert expected.abs().max() > 1.0  # not a vacuous comparison
    assert torch.allclose(our_logits(ours, x), expected, atol=TOLERANCE, rtol=0)


def our_config(case: Case) -> ModelConfig:
    hf = case.hf
    scaling = hf.get("rope_scaling")
    heads = int(hf.get("num_attention_heads", 4))
    return ModelConfig(
        vocab_size=96,
        dim=32,
        n_layers=2,
        n_heads=heads,
        n_kv_heads=int(hf.get("num_key_value_heads", heads)),
        ffn_dim=56,
        max_seq_len=64,
        rope_theta=float(hf.get("rope_theta", 10000.0)),
        norm_eps=1e-6,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        rope_scaling=None
        if scaling is None
        else RopeScaling(**{k: v for k, v in scaling.items() if k != "rope_type"}),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ours_to_theirs(case: Case, tmp_path: Path) -> None:
    ours = build_model(our_config(case), seed=2)
    randomize(ours, seed=2)
    files = save_checkpoint(ours, tmp_path, max_shard_bytes=20_000 if case.shard else 5 * 2**30)
    assert (len(files) > 1) == (case.shard is not None)
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    x = tokens(ours.cfg.vocab_size)
    expected = our_logits(ours, x)
    assert expected.abs().max() > 1.0
    assert torch.allclose(their_logits(theirs, x), expected, atol=TOLERANCE, rtol=0)


def test_both_layouts_read_the_same() -> None:
    legacy = {"rope_theta": 500000.0, "rope_scaling": LLAMA3}
    new = {"rope_parameters": {**LLAMA3, "rope_theta": 500000.0}}
    a, b = config_from_hf({**SHAPE, **legacy}), config_from_hf({**SHAPE, **new})
    assert a == b
    assert (b.rope_theta, b.rope_scaling) == (500000.0, RopeScaling(8.0, 1.0, 4.0, 16))
    # Both layouts in one file (a converted config) are fine when they agree.
    assert config_from_hf({**SHAPE, **legacy, **new}) == a
    default = config_from_hf({**SHAPE, "rope_parameters": {"rope_type": "default", "rope_theta": 7.0e4}})
    assert (default.rope_theta, default.rope_scaling) == (7.0e4, None)


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
        {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}},
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
        {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
        {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e4}},
        {"rope_theta": 1e4, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}},
        {"rope_scaling": {"rope_type": "longrope", "factor": 2.0}},
    ],
    ids=["yarn", "linear", "dynamic", "partial", "per-layer-type", "llama3-incomplete", "conflict", "legacy"],
)
def test_unimplemented_rope_is_refused(rope: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"rope|rotary"):
        config_from_hf({**SHAPE, **rope})


def test_their_yarn_checkpoint_is_refused(tmp_path: Path) -> None:
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    theirs = transformers.LlamaForCausalLM(hf_config({"rope_scaling": yarn}))
    theirs.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="yarn"):
        load_checkpoint(tmp_path)
