"""Shared builders for codec tests: a small LLaMA-like spec, random deltas, signed files."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from scoring.decoder import Expected, Rejected, submission_digest
from scoring.encoder import compress, encode_submission, signed_file
from scoring.signing import Signer, dev_keypair
from scoring.wire import FORMAT_V2, CodecConfig, payload_digest

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


def sign_tensors(
    tensors: Mapping[str, np.ndarray],
    fmt: str,
    *,
    signer: Signer = KEY,
    window: int = WINDOW,
    uid: int = UID,
    spec: Mapping[str, tuple[int, ...]] = SPEC,
) -> bytes:
    """A `fmt` file of `tensors` signed as a peer would sign it (over the canonical digest). A file
    whose index stream does not decode is signed over its raw tensors: it is refused before the
    signature is looked at."""
    try:
        digest = submission_digest(tensors, spec, CFG, fmt)
    except Rejected:
        digest = payload_digest(tensors)
    return signed_file(tensors, digest, signer, window=window, uid=uid, base=BASE, cfg=CFG, fmt=fmt)
