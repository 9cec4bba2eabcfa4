"""Shared builders for codec tests: a small LLaMA-like spec, random deltas, signed files."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from scoring.decoder import Expected
from scoring.encoder import compress, encode_submission
from scoring.signing import dev_keypair
from scoring.wire import FORMAT_V2, CodecConfig

SPEC: dict[str, tuple[int, ...]] = {
    "embed.weight": (97, 64),  # 6,208 values: one full chunk plus a tail
    "attn.q_proj.weight": (64, 64),  # exactly one chunk
    "mlp.up_proj.weight": (172, 64),  # 11,008: two full chunks plus a tail
    "norm.weight": (64,),  # shorter than topk: every value is kept
    "tiny.bias": (3,),
}
BASE = "ab" * 32
WINDOW, UID = 7, 3
KEY = dev_keypair("//gauntlet-test-peer")
CFG = CodecConfig()


def random_delta(seed: int = 0, spec: Mapping[str, tuple[int, ...]] = SPEC) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g) * 1e-3 for n, s in spec.items()}


def make_file(seed: int = 0, spec: Mapping[str, tuple[int, ...]] = SPEC, fmt: str = FORMAT_V2) -> bytes:
    delta = random_delta(seed, spec)
    return encode_submission(
        compress(delta, None, CFG), window=WINDOW, uid=UID, base=BASE, signer=KEY, cfg=CFG, fmt=fmt
    )


def expect() -> Expected:
    return Expected(window=WINDOW, uid=UID, hotkey=KEY.ss58_address, base=BASE)
