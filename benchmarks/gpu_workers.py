"""gpu_check's worker part: one Ray evaluation worker per visible GPU against one replica in-process.

A window of archived submissions of a 127M-parameter LLaMA-shaped model (d=1024, 8 layers, 32k
vocabulary; bench_scale's window builder: a real corpus, a checkpoint and signed `gauntlet/2` files
in a blob folder) is evaluated by
a replica in this process on GPU 0, then by a Ray pool with one actor per GPU (Ray pins each actor to
its own device). Reports peers per minute for both and whether the evaluations are bit-identical
(CUDA kernels run in deterministic mode where they have one, so equality is expected, not promised).
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.bench_scale import make_window, results, timed
from scoring.model import ModelConfig
from validator.workers.pool import LocalPool
from validator.workers.replica import Replica

MID = ModelConfig(vocab_size=32000, dim=1024, n_layers=8, n_heads=16, n_kv_heads=8, ffn_dim=2816)
SMOKE = ModelConfig(vocab_size=256, dim=128, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=344)


def workers_check(gpus: int, peers: int = 8) -> dict[str, Any]:
    """With `gpus` = 0 (gpu_check --smoke) one CPU worker and a tiny model: checks the script only."""
    import ray

    from validator.workers.ray_pool import PoolConfig, RayPool

    workers, model = max(gpus, 1), MID if gpus else SMOKE
    with tempfile.TemporaryDirectory(prefix="gauntlet-gpu-workers-") as tmp:
        spec, task, jobs = make_window(Path(tmp), model, peers)
        spec = replace(spec, devices=("cuda" if gpus else "cpu",), threads=None if gpus else 1)
        local, ppm_local = timed(LocalPool(Replica(spec)), task, jobs, warm=1)
        ray.init(num_cpus=workers + 1, num_gpus=gpus, include_dashboard=False, log_to_driver=False)
        pool = RayPool(spec, PoolConfig(workers=workers, gpus_per_worker=1.0 if gpus else 0.0))
        remote, ppm_ray = timed(pool, task, jobs, warm=workers)
        devices = sorted({info.device for info in ray.get([a.info.remote() for a in pool.actors])})
        pool.close()
        ray.shutdown()
    return {
        "model": f"d={model.dim}, {model.n_layers} layers, vocab {model.vocab_size}",
        "peers": peers,
        "workers": workers,
        "worker_devices": devices,
        "peers_per_minute": {
            "in_process": round(ppm_local, 1),
            f"ray_{workers}_workers": round(ppm_ray, 1),
        },
        "identical": results(remote) == results(local),
    }
