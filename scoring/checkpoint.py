"""Load and save checkpoints in the Hugging Face LLaMA layout: `config.json` + `*.safetensors`.

A sharded checkpoint has `model.safetensors.index.json` (`weight_map`: tensor name -> shard file).
Only safetensors is read (never pickle), tensor by tensor, so a 70B checkpoint streams into place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from scoring.model import LlamaModel, ModelConfig, RopeScaling, build_model

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
# Buffers some exporters write that carry no learned state.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.max_seq_len,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        out["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        }
    return out


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Map an HF LLaMA `config.json` onto ModelConfig; refuse what this decoder does not implement."""
    if hf.get("hidden_act", "silu") != "silu" or hf.get("attention_bias") or hf.get("mlp_bias"):
        raise ValueError("only bias-free SiLU LLaMA checkpoints are supported")
    heads = int(hf["num_attention_heads"])
    if "head_dim" in hf and int(hf["head_dim"]) * heads != int(hf["hidden_size"]):
        raise ValueError("head_dim × heads must equal hidden_size")
    theta, scaling = rope_from_hf(hf)
    return ModelConfig(
        vocab_size=int(hf["vocab_size"]),
        dim=int(hf["hidden_size"]),
        n_layers=int(hf["num_hidden_layers"]),
        n_heads=heads,
        n_kv_heads=int(hf.get("num_key_value_heads", heads)),
        ffn_dim=int(hf["intermediate_size"]),
        max_seq_len=int(hf.get("max_position_embeddings", 2048)),
        rope_theta=theta,
        norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        rope_scaling=scaling,
    )


def rope_from_hf(hf: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    """(theta, scaling) from either layout: transformers >= 5 writes one `rope_parameters` block
    (theta inside it), older versions top-level `rope_theta` + `rope_scaling`. Reading only the old
    keys would load a new checkpoint silently wrong (theta 10000, no scaling), so both are read, and
    a config whose two layouts disagree is refused rather than guessed."""
    legacy_theta, legacy_scaling = hf.get("rope_theta"), hf.get("rope_scaling")
    default_theta = float(legacy_theta if legacy_theta is not None else 10000.0)
    params = hf.get("rope_parameters")
    if params is None:
        return default_theta, rope_scaling_from_hf(legacy_scaling)
    if not isinstance(params, dict) or not ({"rope_type", "type", "rope_theta"} & params.keys()):
        # e.g. one block per attention type ({"full_attention": {...}, ...}): not a LLaMA layout.
        raise ValueError(f"unsupported rope_parameters {params!r}")
    theta = float(params.get("rope_theta", default_theta))
    scaling = rope_scaling_from_hf(params)
    if legacy_theta is not None and float(legacy_theta) != theta:
        raise ValueError(f"rope_theta {legacy_theta} disagrees with rope_parameters {theta}")
    if legacy_scaling is not None and rope_scaling_from_hf(legacy_scaling) != scaling:
        raise ValueError("rope_scaling disagrees with rope_parameters")
    return theta, scaling


def rope_scaling_from_hf(raw: dict[str, Any] | None) -> RopeScaling | None:
    """The scaling part of a `rope_scaling` or `rope_parameters` block; only llama3 is implemented."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"unsupported rope scaling {raw!r}")
    if float(raw.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial rotary embeddings are not supported")
    kind = raw.get("rope_type", raw.get("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise ValueError(f"unsupported rope type {kind!r} (only default and llama3 are implemented)")
    try:
        return RopeScaling(
            factor=float(raw["factor"]),
            low_freq_factor=float(raw["low_freq_factor"]),
            high_freq_factor=float(raw["high_freq_factor"]),
            original_max_position_embeddings=int(raw["original_max_position_embeddings"]),
        )
    except KeyError as missing:
        raise ValueError(f"llama3 rope scaling lacks {missing}") from None


def weight_map(path: Path) -> dict[str, str]:
    """tensor name -> shard file name, for sharded and single-file checkpoints alike."""
    index = path / INDEX_NAME
    if index.exists():
        mapping = json.loads(index.read_text())["weight_map"]
        return {str(k): str(v) for k, v in mapping.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    out: dict[str, str] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            out.update(dict.fromkeys(handle.keys(), f.name))
    return out


def load_checkpoint(
    path: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> LlamaModel:
    """Build the model described by `path/config.json` and fill it from the safetensors shards."""
    root = Path(path)
    cfg = config_from_hf(json.loads((root / "config.json").read_text()))
    # Allocate without initializing: a random init of a 70B model would cost minutes for nothing.
    model = build_model(cfg, device="meta").to_empty(device=device).to(dtype)
    params = dict(model.named_parameters())
    names = {k: v for k, v in weight_map(root).items() if not k.endswith(IGNORED_SUFFIXES)}
    if cfg.tie_embeddings:
        names.pop("lm_head.weight", None)  # some tied exports still store the shared matrix twice
    missing, extra = params.keys() - names.keys(), names.keys() - params.keys()
    if missing or extra:
        raise ValueError(
            f"checkpoint mismatch: missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}"
        )
    by_file: dict[str, list[str]] = {}
    for name, file in names.items():
        by_file.setdefault(file, []).append(name)
    with torch.no_grad():
        for file, tensor_names in sorted(by_file.items()):
            with safe_open(str(root / file), framework="pt") as handle:
                for name in tensor_names:
                    tensor = handle.get_tensor(name)
                    if tuple(tensor.shape) != tuple(params[name].shape):
                        raise ValueError(
                            f"{name}: shape {tuple(tensor.shape)} != {tuple(params[name].shape)}"
                        )
                    params[name].copy_(tensor)
    return model


def save_checkpoint(model: LlamaModel, path: str | Path, *, max_shard_bytes: int = 5 * 2**30) -> list[Path]:
    """Write config.json and safetensors shards (with an index when more than one); returns the shards."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config_to_hf(model.cfg), indent=2))
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, p in model.named_parameters():
        nbytes = p.numel() * p.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = p.detach().to("cpu").contiguous()
        size += nbytes
    if len(shards) == 1:
        (root / INDEX_NAME).unlink(missing_ok=True)  # a stale index would shadow the new single file
        save_file(shards[0], str(root / SINGLE_NAME), metadata={"format": "pt"})
        return [root / SINGLE_NAME]
    files = [root / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    mapping: dict[str, str] = {}
    total = 0
    for file, tensors in zip(files, shards, strict=True):
        save_file(tensors, str(file), metadata={"format": "pt"})
        mapping.update(dict.fromkeys(tensors, file.name))
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": mapping}
    (root / INDEX_NAME).write_text(json.dumps(index, indent=2))
    return files
