"""Codec size and speed, `gauntlet/1` against `gauntlet/2`, on a synthetic and on real updates.

Three updates: the 245.9M-parameter LLaMA-shaped random update (d=2048, 4 layers, vocab 32k), and real
error-feedback updates after a few SparseLoCo windows (H inner AdamW steps on the demo's generated
corpus, error feedback 0.95, the sent update applied at outer lr 1 each window) of the demo's tiny model
and of a wider one (d=512) whose tensors are mostly whole chunks, as at the run's scale.
For each: bytes and ratio vs fp32, bits per index and per value against their information limits
(log2 C(L, k) per chunk for the positions; the empirical entropy of the 2-bit codes for the values),
packing speed (bit packing, digest and signature of the already compressed update: the part the
formats differ in; top-k and quantization are the same for both), decode speed, decode time v2 ÷ v1,
and decode time against its floor (`torch.zeros` plus `index_put_` of the same output). Prints
readable lines, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("HOME", tempfile.mkdtemp(prefix="gauntlet-bench-home-"))

import numpy as np
import torch

from scoring.corpus import generate_corpus
from scoring.data import Dataset, batches, derive_seed, draw_pages
from scoring.decoder import Expected, decode_submission
from scoring.encoder import CompressedParam, compress, encode_submission, pack_tensors, to_sparse
from scoring.model import ModelConfig, build_model, param_spec
from scoring.signing import dev_keypair
from scoring.train import InnerConfig, train_inner
from scoring.wire import FORMAT, FORMAT_V2, ChunkLayout, CodecConfig

CFG, KEY, BASE = CodecConfig(), dev_keypair("//bench"), "0" * 64
Spec = dict[str, tuple[int, ...]]


def llama_spec(d: int, ffn: int, layers: int, vocab: int, kv: int) -> Spec:
    spec: Spec = {"model.embed_tokens.weight": (vocab, d)}
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


MODELS = {
    "demo": ModelConfig.tiny(),  # what the demo's peers train: 0.76M parameters, many small tensors
    "wide": ModelConfig(dim=512, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=1376),  # 11.8M, full chunks
    # 26M: the ~16 KB safetensors header (fixed per tensor, not per parameter) falls to ~3 % of the file
    "wider": ModelConfig(dim=768, n_layers=4, n_heads=12, n_kv_heads=6, ffn_dim=2048),
}


def ef_updates(model_cfg: ModelConfig, windows: int, steps: int) -> tuple[Spec, dict[str, CompressedParam]]:
    """The last of `windows` real error-feedback updates of one peer training on the demo's corpus."""
    with tempfile.TemporaryDirectory() as tmp:
        generate_corpus(Path(tmp), seed=0, n_tokens=200_000, shard_tokens=100_000)
        dataset = Dataset.open(Path(tmp), seq_len=64)
        model = build_model(model_cfg, seed=0)
        ef: dict[str, torch.Tensor] = {}
        compressed: dict[str, CompressedParam] = {}
        for w in range(windows):
            pages = draw_pages(derive_seed("bench-codec", w), 8, dataset.n_pages)
            delta = train_inner(model, batches(dataset, pages, 8), InnerConfig(steps=steps))
            compressed = compress(delta, ef, CFG)
            with torch.no_grad():  # the global model moves by the sent update (outer lr 1, one peer)
                for name, p in model.named_parameters():
                    p.sub_(to_sparse(compressed[name], CFG).dense())
        return param_spec(model), compressed


def _log2_choose(n: int, k: int) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def _limits(spec: Spec, compressed: Mapping[str, CompressedParam]) -> tuple[float, float]:
    """Bits per index of log2 C(L, k) per chunk, and the per-tensor empirical entropy of the codes."""
    index_bits = value_bits = 0.0
    for name, shape in spec.items():
        layout = ChunkLayout.of(math.prod(shape), CFG)
        index_bits += layout.full_chunks * _log2_choose(CFG.chunk, layout.k_full)
        index_bits += _log2_choose(layout.tail, layout.k_tail) if layout.tail else 0.0
        counts = np.bincount(compressed[name].codes, minlength=4)
        p = counts[counts > 0] / max(int(counts.sum()), 1)
        value_bits += float(-(p * np.log2(p)).sum()) * int(counts.sum())
    kept = sum(c.codes.size for c in compressed.values())
    return index_bits / kept, value_bits / kept


def measure(spec: Spec, compressed: Mapping[str, CompressedParam], repeats: int) -> dict[str, Any]:
    params = sum(math.prod(s) for s in spec.values())
    kept = sum(c.codes.size for c in compressed.values())
    expect = Expected(window=1, uid=0, hotkey=KEY.ss58_address, base=BASE)
    out: dict[str, Any] = {"params": params}
    for tag, fmt in (("v1", FORMAT), ("v2", FORMAT_V2)):

        def encode(fmt: str = fmt) -> bytes:
            return encode_submission(compressed, window=1, uid=0, base=BASE, signer=KEY, cfg=CFG, fmt=fmt)

        data = encode()
        assert decode_submission(data, spec, expect).verdict.ok
        header = 8 + int.from_bytes(data[:8], "little")
        tensors = pack_tensors(compressed, CFG, fmt)
        idx_bytes = sum(t.nbytes for n, t in tensors.items() if n.endswith(".idx"))
        val_bytes = sum(t.nbytes for n, t in tensors.items() if n.endswith(".val"))
        out |= {
            f"{tag}_bytes": len(data),
            f"{tag}_ratio_vs_fp32": round(params * 4 / len(data), 2),
            f"{tag}_header_bytes": header,
            f"{tag}_payload_ratio_vs_fp32": round(params * 4 / (len(data) - header), 2),
            f"{tag}_bits_per_index": round(idx_bytes * 8 / kept, 3),
            f"{tag}_bits_per_value": round(val_bytes * 8 / kept, 3),
            f"{tag}_pack_params_per_s": round(params / best_of(encode, repeats)),
            f"{tag}_decode_s": best_of(lambda: decode_submission(data, spec, expect), repeats),  # noqa: B023
        }
    index_limit, value_limit = _limits(spec, compressed)
    out |= {"limit_bits_per_index": round(index_limit, 3), "limit_bits_per_value": round(value_limit, 3)}
    out["limit_ratio_vs_fp32"] = round(params * 32 / (kept * (index_limit + value_limit)), 1)
    out["decode_v2_over_v1"] = round(out["v2_decode_s"] / out["v1_decode_s"], 3)
    sparse = {n: to_sparse(c, CFG) for n, c in compressed.items()}

    def floor() -> None:  # the dense hand-over every decoder must at least pay for
        for name, shape in spec.items():
            torch.zeros(math.prod(shape)).index_put_((sparse[name].indices,), sparse[name].values)

    t_floor = best_of(floor, repeats)
    out |= {f"{t}_decode_over_floor": round(out[f"{t}_decode_s"] / t_floor, 3) for t in ("v1", "v2")}
    out |= {f"{t}_decode_s": round(out[f"{t}_decode_s"], 4) for t in ("v1", "v2")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a ~2M-parameter model, two short windows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--windows", type=int, default=4, help="SparseLoCo windows before the real update")
    parser.add_argument("--steps", type=int, default=20, help="inner steps per window (the demo's H)")
    args = parser.parse_args()
    torch.manual_seed(0)
    spec = llama_spec(256, 688, 2, 4096, 64) if args.quick else llama_spec(2048, 5632, 4, 32000, 512)
    delta = {n: torch.randn(s) * 1e-3 for n, s in spec.items()}
    figures: dict[str, Any] = {"threads": torch.get_num_threads()}
    figures["synthetic"] = measure(spec, compress(delta, None, CFG), args.repeats)
    del delta
    windows, steps = (2, 3) if args.quick else (args.windows, args.steps)
    for name in ("demo",) if args.quick else tuple(MODELS):
        real_spec, real = ef_updates(MODELS[name], windows, steps)
        figures[f"ef_{name}"] = measure(real_spec, real, args.repeats) | {"windows": windows, "steps": steps}
    for section in [k for k in figures if k != "threads"]:
        for k, v in figures[section].items():
            sys.stdout.write(f"{section + '.' + k:>42}: {v}\n")
    sys.stdout.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
