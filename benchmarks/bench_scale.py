"""Issue 14's figures: memory per peer against wire size, and evaluation on 1 vs 2 workers.

Workers: one window of P peers (synthetic archived submissions of a small LLaMA-shaped model, a real
corpus) is evaluated by one replica in this process, then by two Ray workers (a local runtime, one
CPU slot each), then again by two workers of which one kills itself with SIGKILL at its first peer.
Every worker and the in-process baseline run torch with one thread, so the ratio is of workers, not of
threads: two workers on a 2-core machine, against one core in-process. Startup (Ray, imports,
checkpoint loading) is excluded: each pool evaluates a warm-up peer first.

`identical`: the two workers' evaluations equal the in-process ones bit for bit (and the memory
part's stored and eager windows leave the same model); `worker_kill_recovered`: the window with a
killed worker has every peer evaluated, equal to the in-process ones, and the kill was seen.
Memory: `rss_per_peer_vs_wire` from benchmarks/scale_memory.py (see there).
Run: `python -m benchmarks.bench_scale [--quick]`; prints one JSON line (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

import torch

from benchmarks.scale_memory import rss_per_peer_vs_wire
from scoring.clipping import median_norms
from scoring.corpus import generate_corpus
from scoring.data import Dataset, batches, heldout_from_seed, window_seed
from scoring.encoder import compress, encode_submission
from scoring.eval_plan import EvalConfig
from scoring.fingerprint import checkpoint_fingerprint
from scoring.loss_score import LossScoreConfig, PeerEval, deterministic, mean_loss
from scoring.model import ModelConfig, build_model
from scoring.signing import dev_keypair
from scoring.wire import CodecConfig
from storage.archive import LocalBlobStore, SubmissionArchive, sha256_hex
from storage.checkpoints import checkpoint_key
from storage.records import CheckpointRecord
from validator.state.global_model import decode_archived, model_bytes
from validator.telemetry.metrics import Metrics
from validator.workers.pool import LocalPool
from validator.workers.replica import Replica
from validator.workers.spec import BlobSpec, ReplicaPlan, WindowTask, WorkerJob, WorkerSpec

CODEC, WINDOW, SEQ_LEN = CodecConfig(), 1, 128
EVAL = EvalConfig(
    pages_per_peer=8, eval_pages=8, heldout_pages=16, batch_size=8,
    loss=LossScoreConfig(eval_lr_factor=0.08, outer_lr=1.0),
)  # fmt: skip
# ≈ 4.9M parameters: a peer's four forward passes take about a second on one core
FULL = ModelConfig(vocab_size=256, dim=256, n_layers=6, n_heads=8, n_kv_heads=4, ffn_dim=688)
QUICK = ModelConfig(vocab_size=256, dim=128, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=344)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_window(
    root: Path, model_cfg: ModelConfig, peers: int
) -> tuple[WorkerSpec, WindowTask, list[WorkerJob]]:
    """A checkpoint and `peers` archived submissions in a blob folder, as the validator leaves them."""
    corpus = root / "corpus"
    generate_corpus(corpus, seed=0, n_tokens=400_000, shard_tokens=100_000)
    dataset = Dataset.open(corpus, seq_len=SEQ_LEN)
    model = build_model(model_cfg, seed=0)
    blobs = LocalBlobStore(root / "blobs")
    data = model_bytes(model)
    digest = sha256_hex(data)
    blobs.put(checkpoint_key(WINDOW, digest), data)
    checkpoint = CheckpointRecord(WINDOW, checkpoint_key(WINDOW, digest), digest, len(data))
    base = checkpoint_fingerprint(dict(model.named_parameters()))
    archive, jobs, norms = SubmissionArchive(blobs), [], []
    for uid in range(1, peers + 1):
        gen = torch.Generator().manual_seed(uid)
        delta = {n: torch.randn(p.shape, generator=gen) * 1e-2 for n, p in model.named_parameters()}
        signer = dev_keypair(f"//bench-peer-{uid}")
        blob = encode_submission(
            compress(delta, None, CODEC), window=WINDOW, uid=uid, base=base, signer=signer, cfg=CODEC
        )
        jobs.append(WorkerJob(WINDOW, uid, archive.put(blob)))
        norms.append({n: p.norm() for n, p in decode_archived(blob, model, CODEC).items()})
    seed = window_seed(b"bench-scale", WINDOW)
    held = batches(dataset, heldout_from_seed(seed, n_pages=EVAL.heldout_pages, dataset=dataset), 8)
    with deterministic(torch.device("cpu")):
        loss_before = mean_loss(model, held)
    spec = WorkerSpec(
        model=model_cfg, dataset_path=str(corpus), seq_len=SEQ_LEN, blobs=BlobSpec(root=str(root / "blobs")),
        eval=EVAL, codec=CODEC, outer_lr=1.0, devices=("cpu",), threads=1,
    )  # fmt: skip
    plan = ReplicaPlan(WINDOW, base, checkpoint, base, ())
    return spec, WindowTask(plan, seed, loss_before, median_norms(norms)), jobs


class KilledOnce(Replica):
    """Kills its own process at the first peer any worker of the run evaluates (a marker file)."""

    def evaluate(self, task: WindowTask, job: WorkerJob) -> PeerEval:
        marker = Path(self.spec.dataset_path).parent / "killed-once"
        try:  # atomic (O_EXCL): two workers at their first peer together must not both find no marker
            marker.touch(exist_ok=False)
        except FileExistsError:
            return super().evaluate(task, job)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: the process was killed")


def results(evals: dict[int, PeerEval]) -> dict[int, tuple[Any, ...]]:
    return {uid: astuple(ev)[1:8] for uid, ev in evals.items()}  # timings are wall clock


def inside(evals: dict[int, PeerEval]) -> float:
    return round(sum(ev.timings.total_s for ev in evals.values()) / len(evals), 3)


def timed(pool: Any, task: WindowTask, jobs: list[WorkerJob], warm: int) -> tuple[dict[int, PeerEval], float]:
    pool.evaluate(task, jobs[:warm])  # replicas built and synced, first kernels run
    started = time.perf_counter()
    out = pool.evaluate(task, jobs)
    elapsed = time.perf_counter() - started
    if out.failed:
        raise RuntimeError(f"peers failed: {out.failed}")
    return out.evals, len(jobs) / elapsed * 60


def workers(quick: bool) -> dict[str, Any]:
    import ray

    from validator.workers.ray_pool import PoolConfig, RayPool, connect

    peers = 4 if quick else 24
    with tempfile.TemporaryDirectory(prefix="gauntlet-bench-scale-") as tmp:
        spec, task, jobs = make_window(Path(tmp), QUICK if quick else FULL, peers)
        torch.set_num_threads(1)  # the baseline gets one core, as each worker does
        say(f"in-process: {peers} peers")
        local, ppm_1 = timed(LocalPool(Replica(spec)), task, jobs, warm=1)
        connect(2)
        say("2 Ray workers")
        pool = RayPool(spec, PoolConfig(workers=2))
        remote, ppm_2 = timed(pool, task, jobs, warm=2)
        pool.close()
        say("2 Ray workers, one killed with SIGKILL at its first peer")
        metrics = Metrics()
        killed = RayPool(spec, PoolConfig(workers=2), metrics=metrics, replica=KilledOnce)
        after_kill = killed.evaluate(task, jobs)
        killed.close()
        ray.shutdown()
    deaths = sum(
        s.value for m in metrics.worker_failures.collect() for s in m.samples if s.name.endswith("_total")
    )
    return {
        "peers": peers,
        "threads_per_worker": 1,
        "peers_per_minute": {"in_process_1_worker": round(ppm_1, 1), "ray_2_workers": round(ppm_2, 1)},
        "speedup_2_workers": round(ppm_2 / ppm_1, 2),
        # LossScore's own seconds per peer, inside each evaluation: how much the cores were shared
        "seconds_per_peer_inside": {"in_process": inside(local), "ray_workers": inside(remote)},
        "workers_identical": results(remote) == results(local),
        "worker_deaths": deaths,
        "worker_kill_recovered": deaths == 1
        and not after_kill.failed
        and results(after_kill.evals) == results(local),
        "cpus": os.cpu_count(),
        # the machine is shared: other processes take cores from both measurements
        "load_average_1m": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small model and few peers (the suite)")
    parser.add_argument("--no-memory", action="store_true", help="only the workers part")
    args = parser.parse_args()
    figures = workers(args.quick)
    if not args.no_memory:
        say("memory per peer (benchmarks/scale_memory.py)")
        memory = (
            rss_per_peer_vs_wire(4, 12, quick=True, eager_high=8) if args.quick else rss_per_peer_vs_wire()
        )
        figures |= {"rss_per_peer_vs_wire": memory["rss_per_peer_vs_wire"], "memory": memory}
    same_memory = bool(figures.get("memory", {}).get("identical", True))
    figures["identical"] = figures["workers_identical"] and same_memory
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
