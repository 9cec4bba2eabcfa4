"""The GPU path, measured once on a CUDA host: LossScore in bf16 autocast on a ≈ 1B-parameter model,
a large submission decoded and put on the device, and the evaluation through the worker pool.

Run through `benchmarks/gpu_check.sh` (it installs the project when it is not importable), or
`python -m benchmarks.gpu_check [--smoke]` from the repository's root. Figures:
- LossScore: one peer's full evaluation (clip, sparse apply at β and at the probe step, four passes,
  exact restores) against its four bare forward passes on the same batches, best of several peers;
  peers per minute from the median evaluation; peak GPU memory.
- Decode: a `gauntlet/2` file of a codec-shaped update of the whole model, checked and decoded by the
  validator's decoder (numpy, on the host's cores), then copied to the GPU and applied once.
- Workers: one evaluation worker per visible GPU, each with its own replica, scoring the same peers.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from scoring.clipping import clip_factors, median_norms
from scoring.decoder import Expected, decode_submission
from scoring.encoder import compress, encode_submission
from scoring.loss_score import (
    Baseline,
    LossScoreConfig,
    PeerJob,
    apply_sparse,
    evaluate_peer,
    mean_loss,
    restore,
)
from scoring.model import LlamaModel, ModelConfig, build_model, count_parameters, param_spec
from scoring.signing import dev_keypair
from scoring.types import SparseParam
from scoring.wire import CodecConfig

CFG = LossScoreConfig()
DEVICE = torch.device("cuda")


def one_billion() -> ModelConfig:
    """≈ 0.98B parameters: d = 2048, 18 layers, GQA 16/8 heads, untied 32k vocabulary."""
    return ModelConfig(
        vocab_size=32000, dim=2048, n_layers=18, n_heads=16, n_kv_heads=8, ffn_dim=5632,
        max_seq_len=2048, tie_embeddings=False,
    )  # fmt: skip


SMOKE = ModelConfig(vocab_size=512, dim=128, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=512)


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def synced(fn: Callable[[], object]) -> float:
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def codec_update(model: LlamaModel, seed: int) -> dict[str, SparseParam]:
    """A codec-shaped update built on the GPU: the top 64 of each 4096-chunk of a random delta, with
    values on a 4-level grid (what a decoded submission looks like to LossScore)."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    out = {}
    for name, p in model.named_parameters():
        flat = torch.randn(p.numel(), generator=gen, device=DEVICE)
        chunks = p.numel() // 4096
        rows = flat[: chunks * 4096].view(chunks, 4096)
        pos = torch.topk(rows.abs(), 64, dim=1, sorted=False).indices.sort(dim=1).values
        idx = (pos + torch.arange(chunks, device=DEVICE)[:, None] * 4096).reshape(-1)
        vals = torch.sign(rows.gather(1, pos)).reshape(-1) * torch.where(
            rows.gather(1, pos).abs().reshape(-1) > 2.5, 2e-3, 1e-3
        )
        out[name] = SparseParam(tuple(p.shape), idx, vals.float())
    return out


def loss_score(model: LlamaModel, peers: int, batch: int, seq: int) -> dict[str, Any]:
    vocab = model.cfg.vocab_size
    gen = torch.Generator().manual_seed(1)
    own = [torch.randint(0, vocab, (batch, seq + 1), generator=gen)]
    held = [torch.randint(0, vocab, (batch, seq + 1), generator=gen)]
    updates = [codec_update(model, 100 + i) for i in range(peers)]
    reference = median_norms([{n: p.norm() for n, p in u.items()} for u in updates])
    baseline = Baseline(held, mean_loss(model, held), reference, CFG)  # also warms the kernels up
    if DEVICE.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    bare, full = [], []
    for i, update in enumerate(updates):
        job = PeerJob(i, update, lambda: own)
        evaluate = partial(evaluate_peer, model, job, own, baseline)
        bare.append(synced(lambda: [mean_loss(model, b) for b in (own, own, held, held)]))
        full.append(synced(evaluate))
    ratios = [f / b for f, b in zip(full, bare, strict=True)]
    return {
        "tokens_per_pass": batch * seq,
        "bare_four_passes_s": min(bare),
        "eval_s": min(full),
        "ratio_to_four_forwards": min(full) / min(bare),
        "ratio_median_of_pairs": statistics.median(ratios),
        "peers_per_minute": 60.0 / statistics.median(full),
        "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if DEVICE.type == "cuda" else None,
    }


def decode_on_device(model: LlamaModel) -> dict[str, Any]:
    cfg = CodecConfig()
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    t = time.perf_counter()
    compressed = {}
    for name, p in model.named_parameters():  # the delta is drawn on the GPU, compressed on the host
        delta = (torch.randn(p.shape, generator=gen, device=DEVICE) * 1e-3).cpu()
        compressed.update(compress({name: delta}, None, cfg))
    compress_s = time.perf_counter() - t
    signer = dev_keypair("//gpu-check")
    t = time.perf_counter()
    data = encode_submission(compressed, window=1, uid=1, base="00" * 32, signer=signer, cfg=cfg)
    encode_s = time.perf_counter() - t
    spec = param_spec(model)
    t = time.perf_counter()
    result = decode_submission(data, spec, Expected(window=1, uid=1, hotkey=signer.ss58_address), cfg)
    decode_s = time.perf_counter() - t
    assert result.update is not None, result.verdict
    params = result.update.params
    t = time.perf_counter()
    on_gpu = {n: SparseParam(p.shape, p.indices.to(DEVICE), p.values.to(DEVICE)) for n, p in params.items()}
    sync()
    h2d_s = time.perf_counter() - t
    reference = {n: float(p.norm()) for n, p in on_gpu.items()}
    apply_s = synced(lambda: restore(apply_sparse(model, on_gpu, clip_factors(on_gpu, reference), CFG.beta)))
    return {
        "wire_bytes": len(data),
        "fp32_bytes": 4 * count_parameters(model),
        "compression_x": 4 * count_parameters(model) / len(data),
        "compress_s": compress_s,
        "encode_s": encode_s,
        "decode_s": decode_s,
        "decode_mb_per_s": len(data) / 1e6 / decode_s,
        "h2d_s": h2d_s,
        "apply_restore_s": apply_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--skip-workers", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="a small model on the CPU: checks the script")
    args = parser.parse_args()
    global DEVICE
    if args.smoke:
        DEVICE = torch.device("cpu")
    elif not torch.cuda.is_available():
        print(json.dumps({"gpu": False, "error": "no CUDA device visible"}))
        raise SystemExit(2)
    gpus = torch.cuda.device_count() if DEVICE.type == "cuda" else 0
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0) if gpus else None, "gpus": gpus}
    out["torch"] = torch.__version__
    t = time.perf_counter()
    cfg = SMOKE if args.smoke else one_billion()
    model = build_model(cfg, seed=0, device=DEVICE)
    out["params"] = count_parameters(model)
    out["build_s"] = time.perf_counter() - t
    print(f"model: {out['params'] / 1e9:.2f}B parameters on {out['gpu']}", flush=True)
    out["loss_score"] = loss_score(model, args.peers, args.batch, args.seq)
    print(json.dumps(out["loss_score"]), flush=True)
    out["decode"] = decode_on_device(model)
    print(json.dumps(out["decode"]), flush=True)
    if not args.skip_workers:
        from benchmarks.gpu_workers import workers_check

        out["workers"] = workers_check(gpus)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
