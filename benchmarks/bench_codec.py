"""Codec throughput on LLaMA-block-shaped tensors, and decode time against its floor.

The floor is what any decoder must at least do to hand a dense update over: `torch.zeros` of the
parameter plus `index_put_` of the kept values. Prints readable lines, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("HOME", tempfile.mkdtemp(prefix="gauntlet-bench-home-"))

import torch

from scoring.decoder import Expected, decode_submission
from scoring.encoder import compress, compress_to_sparse, encode_submission
from scoring.signing import dev_keypair
from scoring.wire import CodecConfig


def llama_spec(d: int, ffn: int, layers: int, vocab: int, kv: int) -> dict[str, tuple[int, ...]]:
    spec: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, d)}
    for i in range(layers):
        p = f"model.layers.{i}."
        spec |= {
            p + "self_attn.q_proj.weight": (d, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, d),
            p + "mlp.gate_proj.weight": (ffn, d),
            p + "mlp.up_proj.weight": (ffn, d),
            p + "mlp.down_proj.weight": (d, ffn),
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
        }
    return spec | {"model.norm.weight": (d,)}


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if len(times) < 3 else statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a ~2M-parameter model instead of ~245M")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    spec = llama_spec(256, 688, 2, 4096, 64) if args.quick else llama_spec(2048, 5632, 4, 32000, 512)
    params = sum(torch.Size(s).numel() for s in spec.values())
    delta = {n: torch.randn(s) * 1e-3 for n, s in spec.items()}
    cfg, key = CodecConfig(), dev_keypair("//bench")
    base = "0" * 64

    def encode() -> bytes:
        return encode_submission(compress(delta, None, cfg), window=1, uid=0, base=base, signer=key, cfg=cfg)

    data = encode()
    t_encode = best_of(encode, args.repeats)
    expect = Expected(window=1, uid=0, hotkey=key.ss58_address, base=base)
    result = decode_submission(data, spec, expect)
    assert result.update is not None, result.verdict
    t_decode = best_of(lambda: decode_submission(data, spec, expect), args.repeats)
    sparse = compress_to_sparse(delta, None, cfg)

    def floor() -> None:  # the dense hand-over every decoder must at least pay for
        for name, shape in spec.items():
            out = torch.zeros(torch.Size(shape).numel())
            out.index_put_((sparse[name].indices,), sparse[name].values)

    t_floor = best_of(floor, args.repeats)
    t_dense = best_of(
        lambda: [p.dense() for p in result.update.params.values()] if result.update else None, args.repeats
    )
    figures = {
        "params": params,
        "bytes": len(data),
        "ratio_vs_fp32": round(params * 4 / len(data), 2),
        "encode_params_per_s": round(params / t_encode),
        "decode_params_per_s": round(params / t_decode),
        "decode_s": round(t_decode, 4),
        "floor_s": round(t_floor, 4),
        "decode_over_floor": round(t_decode / t_floor, 3),
        "decode_plus_dense_over_floor": round((t_decode + t_dense) / t_floor, 3),
        "threads": torch.get_num_threads(),
    }
    for k, v in figures.items():
        sys.stdout.write(f"{k:>30}: {v}\n")
    sys.stdout.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
