"""A window's peak resident memory per extra peer, against one submission's wire size (issue 14).

Each measurement runs a window's memory-relevant stages in a fresh child process over P synthetic
submissions of a >= 100M-parameter LLaMA-shaped model: every file streamed from a "store" folder to
the window's folder on disk in 8 MiB pieces (never whole in memory), judged (all checks, signature
included), the clip reference from the recorded norms, the copy checks (sketch sample and exact
pairs), the persistence check's residual sketches (held as the bytes the record stores),
LossScore's apply/restore of every peer on the model, and the aggregate of every peer into it. The
child reports its peak RSS (`ru_maxrss`) and a digest of the model afterwards.

`rss_per_peer_vs_wire` = (peak(high) − peak(low)) / (high − low) / mean wire size: the target is
≤ 0.05. The eager path (every decoded update held, as before issue 14) is measured the same way for
comparison, and `identical` says whether both paths leave the model bit-identical.
Run: `python benchmarks/scale_memory.py [--quick]`; prints one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scoring.aggregation import aggregate_into
from scoring.clipping import clip_factors, median_norms
from scoring.decoder import Expected, decode_submission
from scoring.encoder import CompressedParam, encode_submission
from scoring.lazy_update import judge_file
from scoring.loss_score import apply_sparse, restore
from scoring.model import ModelConfig, build_model, param_spec
from scoring.persistence import PersistenceConfig
from scoring.ranking import Status
from scoring.signing import dev_keypair
from scoring.types import ParamSpec, SparseUpdate
from scoring.uniqueness import PeerPayload, UniquenessConfig, find_copies
from scoring.wire import ChunkLayout, CodecConfig, numel_of
from validator.round.drift import measure_drift, no_sketches
from validator.round.outcomes import PeerTarget, PeerWindow

CFG, BASE, WINDOW = CodecConfig(), "0" * 64, 5
# 100.4M parameters: a 32k vocabulary, d = 1024, 6 layers, grouped-query attention
MODEL = ModelConfig(vocab_size=32_000, dim=1024, n_layers=6, n_heads=16, n_kv_heads=4, ffn_dim=2816)
QUICK = ModelConfig(vocab_size=4096, dim=256, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=688)


def _compressed(spec: ParamSpec, rng: np.random.Generator) -> dict[str, CompressedParam]:
    """A random update in compressed form: one kept position per stratum of each full chunk."""
    out = {}
    for name, shape in spec.items():
        lay = ChunkLayout.of(numel_of(shape), CFG)
        stride = CFG.chunk // lay.k_full
        body = np.arange(lay.k_full) * stride + rng.integers(0, stride, (lay.full_chunks, lay.k_full))
        tail = np.sort(rng.choice(lay.tail, lay.k_tail, replace=False)) if lay.tail else np.zeros(0)
        idx = np.concatenate([body.reshape(-1), tail]).astype(np.uint16)
        codes = rng.integers(0, 4, idx.size).astype(np.uint8)
        scale = rng.uniform(1e-4, 1e-3, lay.chunks).astype(np.float16)
        lut = np.array([-1.5, -0.5, 0.5, 1.5], np.float32)
        out[name] = CompressedParam(tuple(shape), idx, codes, scale, lut)
    return out


def make_store(store: Path, model_cfg: ModelConfig, peers: int) -> list[Path]:
    """`peers` signed submissions (distinct updates) in `store`, reusing files already there."""
    spec = param_spec(build_model(model_cfg, device="meta"))
    store.mkdir(parents=True, exist_ok=True)
    files = []
    for uid in range(peers):
        path = store / f"peer-{uid:03d}.safetensors"
        if not path.exists():
            signer = dev_keypair(f"//scale-peer-{uid}")
            data = encode_submission(
                _compressed(spec, np.random.default_rng(uid)), window=WINDOW, uid=uid, base=BASE,
                signer=signer, cfg=CFG,
            )  # fmt: skip
            path.write_bytes(data)
        files.append(path)
    return files


def _stream(src: Path, dest: Path) -> None:
    """The fetch's shape: the body goes to disk piece by piece, never whole in memory."""
    with open(src, "rb") as fin, open(dest, "wb") as fout:
        shutil.copyfileobj(fin, fout, 8 << 20)


def run_window(files: list[Path], spool: Path, model_cfg: ModelConfig, stored: bool) -> dict[str, Any]:
    """The window's stages over `files`; peak RSS in bytes and the model's digest afterwards."""
    torch.set_num_threads(1)
    model = build_model(model_cfg, seed=0)
    spec = param_spec(model)
    updates: list[SparseUpdate] = []
    for uid, src in enumerate(files):
        dest = spool / src.name
        _stream(src, dest)
        expect = Expected(window=WINDOW, uid=uid, base=BASE)
        result = (
            judge_file(dest, spec, expect, CFG)
            if stored
            else decode_submission(dest.read_bytes(), spec, expect, CFG)
        )
        assert result.update is not None, result.verdict
        updates.append(result.update)
    reference = median_norms([u.norms() for u in updates], floor=1e-12)
    payloads = [PeerPayload(f"p{i:03d}", u.digest, float(i), u.params, 1.0) for i, u in enumerate(updates)]
    findings = find_copies(payloads, UniquenessConfig(), seed=7)
    # the persistence check as the round runs it: the residual bytes the window's record stores
    peers = [
        PeerWindow(PeerTarget(i, p.hotkey, None), Status.OK, update=u)
        for i, (p, u) in enumerate(zip(payloads, updates, strict=True))
    ]
    sketches = measure_drift(peers, PersistenceConfig(), seed=11, earlier=no_sketches).residuals
    del peers
    for u in updates:  # LossScore's apply/restore (the forward passes in between hold no update)
        restore(apply_sparse(model, u.params, clip_factors(u.params, reference), 0.08))
    aggregate_into(dict(model.named_parameters()), [u.params for u in updates], reference, 0.4)
    digest = hashlib.sha256()
    for _, p in model.named_parameters():
        digest.update(p.detach().numpy().tobytes())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {
        "peak_rss": peak,
        "model": digest.hexdigest(),
        "findings": len(findings),
        "sketches": len(sketches),
    }


def _child(files: list[Path], quick: bool, stored: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gauntlet-scale-") as spool:
        args = [sys.executable, __file__, "--child", spool, "--stored" if stored else "--eager"]
        args += ["--quick"] if quick else []
        started = time.perf_counter()
        out = subprocess.run([*args, *map(str, files)], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"window child failed: {out.stderr[-2000:]}")
        figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return figures | {"seconds": round(time.perf_counter() - started, 1)}


def rss_per_peer_vs_wire(
    low: int = 16,
    high: int = 128,
    *,
    quick: bool = False,
    eager_high: int | None = 32,
    store: Path | None = None,
) -> dict[str, Any]:
    """Peak RSS growth per extra peer ÷ wire size, stored path (and eager, up to `eager_high` peers)."""
    model_cfg = QUICK if quick else MODEL
    with tempfile.TemporaryDirectory(prefix="gauntlet-store-") as tmp:
        files = make_store(store or Path(tmp), model_cfg, high)
        wire = float(np.mean([f.stat().st_size for f in files]))
        lo, hi = _child(files[:low], quick, True), _child(files[:high], quick, True)
        out: dict[str, Any] = {
            "params": sum(numel_of(s) for s in param_spec(build_model(model_cfg, device="meta")).values()),
            "wire_bytes": round(wire),
            "peers": [low, high],
            "peak_rss_bytes": [lo["peak_rss"], hi["peak_rss"]],
            "seconds": [lo["seconds"], hi["seconds"]],
            "rss_per_peer_vs_wire": round((hi["peak_rss"] - lo["peak_rss"]) / (high - low) / wire, 4),
        }
        if eager_high is not None:
            e_lo, e_hi = _child(files[:low], quick, False), _child(files[:eager_high], quick, False)
            out["eager_rss_per_peer_vs_wire"] = round(
                (e_hi["peak_rss"] - e_lo["peak_rss"]) / (eager_high - low) / wire, 4
            )
            out["eager_peers"] = [low, eager_high]
            out["identical"] = e_lo["model"] == lo["model"]  # the same window, stored or eager
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small model, 4 vs 12 peers")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stored", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--eager", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        figures = run_window(args.files, args.child, QUICK if args.quick else MODEL, stored=args.stored)
        print(json.dumps(figures))
        return
    figures = rss_per_peer_vs_wire(4, 12, quick=True, eager_high=8) if args.quick else rss_per_peer_vs_wire()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
