"""A LLaMA-style decoder in plain torch, with Hugging Face parameter names (DESIGN.md §6).

Parameter names match the HF `LlamaForCausalLM` layout one to one (`model.layers.{i}.self_attn.q_proj
.weight`, ...), so a checkpoint, a sparse update and `named_parameters()` all share one key space.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """LLaMA-3 style rotary frequency scaling (HF `rope_scaling` with `rope_type == "llama3"`)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.factor < 1.0 or self.low_freq_factor <= 0 or self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(f"invalid rope scaling {self}")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape of the decoder; `tiny()` for tests and the demo, `llama_70b()` for the production shape."""

    vocab_size: int = 256
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 4
    ffn_dim: int = 344
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    rope_scaling: RopeScaling | None = None

    def __post_init__(self) -> None:
        positive = (self.vocab_size, self.dim, self.n_layers, self.n_heads, self.n_kv_heads, self.ffn_dim)
        if min(positive) <= 0 or self.max_seq_len <= 0:
            raise ValueError(f"all sizes must be positive: {self}")
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("dim must divide by n_heads and n_heads by n_kv_heads")
        if self.head_dim % 2:
            raise ValueError("rotary embeddings need an even head dimension")
        if self.rope_theta <= 0 or self.norm_eps <= 0:
            raise ValueError("rope_theta and norm_eps must be positive")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @staticmethod
    def tiny(vocab_size: int = 256) -> ModelConfig:
        """About 0.9M parameters: the MEASURED.md model (d=128, 4 layers, byte vocabulary)."""
        return ModelConfig(vocab_size=vocab_size, dim=128, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=344)

    @staticmethod
    def llama_70b() -> ModelConfig:
        """The 72.7B shape: 80 layers, d=8192, 64 query / 8 KV heads, untied embeddings."""
        return ModelConfig(
            vocab_size=128256,
            dim=8192,
            n_layers=80,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim=28672,
            max_seq_len=8192,
            rope_theta=500000.0,
            tie_embeddings=False,
        )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32 (as HF does) so bf16 activations do not lose the mean square.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_frequencies(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies (head_dim/2,), with LLaMA-3 scaling when configured."""
    exponents = torch.arange(0, cfg.head_dim, 2, dtype=torch.float64, device="cpu") / cfg.head_dim
    inv = 1.0 / (cfg.rope_theta**exponents)
    s = cfg.rope_scaling
    if s is None:
        return inv.float()
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    mid = (1 - smooth) * inv / s.factor + smooth * inv
    scaled = torch.where(wavelen > low_wavelen, inv / s.factor, inv)
    scaled = torch.where((wavelen <= low_wavelen) & (wavelen >= high_wavelen), mid, scaled)
    return scaled.float()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's rotate-half convention: x (B, H, T, D), cos/sin (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)  # (B, KV, T, D)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # enable_gqa lets SDPA share each KV head across its query group without materializing copies.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv != self.n_heads)
        out: torch.Tensor = self.o_proj(y.transpose(1, 2).reshape(b, t, -1))
        return out


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class Backbone(nn.Module):
    """The `model.` prefix of HF names: embeddings, layers, final norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)


class LlamaModel(nn.Module):
    """Decoder-only LM: tokens (B, T) int64 -> logits (B, T, vocab)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        # Tied: no lm_head module at all, so `named_parameters()` lists exactly the HF checkpoint keys.
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        # A plain fp32 CPU tensor, not a buffer: casting the model to bf16 must not round the frequencies.
        self.inv_freq = rope_frequencies(cfg)

    def rotary(self, t: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.outer(torch.arange(t, device=device, dtype=torch.float32), self.inv_freq.to(device))
        emb = torch.cat((angles, angles), dim=-1)  # (T, D)
        return emb.cos(), emb.sin()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {tokens.shape[1]} exceeds max_seq_len {self.cfg.max_seq_len}")
        x = self.model.embed_tokens(tokens)
        cos, sin = self.rotary(tokens.shape[1], tokens.device)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, weight)


def build_model(cfg: ModelConfig, *, seed: int = 0, device: str | torch.device = "cpu") -> LlamaModel:
    """A randomly initialized model, identical for the same seed (fp32). `device="meta"` allocates nothing."""
    with torch.device(device):
        model = LlamaModel(cfg)
    if str(device) == "meta":
        return model
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                # Draw on CPU from one generator in name order, so init is the same on any device.
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return model


def param_spec(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """name -> shape in `named_parameters()` order (the codec's and checks' view of the model)."""
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def select_device(preference: str = "auto") -> torch.device:
    """CUDA when present (or asked for), CPU otherwise."""
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(preference)


def autocast(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on CUDA; plain fp32 on CPU (score differences are below bf16 resolution there)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
