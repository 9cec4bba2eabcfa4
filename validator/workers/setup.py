"""A worker pool from process settings (`eval_workers`, `eval_ray_address`); None: in-process."""

from __future__ import annotations

from pathlib import Path

from scoring.eval_plan import EvalConfig
from scoring.model import ModelConfig
from scoring.wire import CodecConfig
from validator.settings import Settings
from validator.state.ledger import Ledger
from validator.telemetry.metrics import Metrics
from validator.workers.pool import WorkerPool
from validator.workers.remote import RemoteEvaluation
from validator.workers.spec import BlobSpec, WorkerSpec


def blob_spec(s: Settings) -> BlobSpec:
    """The validator's own blob store as workers open it (the same folder, or the same bucket)."""
    if s.archive_url is None:
        return BlobSpec(root=str((Path(s.workdir) / "blobs").resolve()))
    secret = s.archive_secret_access_key
    return BlobSpec(
        url=s.archive_url,
        key_id=s.archive_access_key_id,
        secret=None if secret is None else secret.get_secret_value(),
    )


def worker_spec(s: Settings, model: ModelConfig, eval_cfg: EvalConfig, codec: CodecConfig) -> WorkerSpec:
    if s.dataset_path is None:
        raise ValueError("evaluation workers read the dataset themselves: set dataset_path")
    return WorkerSpec(
        model=model,
        dataset_path=str(Path(s.dataset_path).resolve()),
        seq_len=s.seq_len,
        blobs=blob_spec(s),
        eval=eval_cfg,
        codec=codec,
        outer_lr=s.outer_lr,
        devices=(s.device,),
    )


def start_pool(s: Settings, spec: WorkerSpec, metrics: Metrics | None = None) -> WorkerPool | None:
    """Ray actors when `eval_workers` > 0: a GPU each where the cluster has GPUs (and the device is
    not forced to the CPU), one CPU slot each otherwise. Ray is imported only here (an extra)."""
    if s.eval_workers == 0:  # the settings refuse an eval_ray_address without workers
        return None
    try:
        import ray

        from validator.workers.ray_pool import PoolConfig, RayPool, connect
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError("eval_workers needs Ray: pip install -e '.[cluster]'") from e
    connect(s.eval_workers, s.eval_ray_address)
    resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
    gpus = float(resources.get("GPU", 0.0)) if s.device != "cpu" else 0.0
    cfg = PoolConfig(workers=s.eval_workers, gpus_per_worker=1.0 if gpus >= 1 else 0.0)
    _check_fits(s.eval_workers, gpus if cfg.gpus_per_worker else None, float(resources.get("CPU", 0.0)))
    return RayPool(spec, cfg, metrics=metrics)


def _check_fits(workers: int, gpus: float | None, cpus: float) -> None:
    """Refuse a pool the cluster cannot place: Ray would wait for the missing actors' resources
    (and the first sync would hang until its deadline) instead of saying so. Every actor takes one
    CPU slot, and one GPU when `gpus` is not None."""
    if gpus is not None and workers > gpus:
        raise ValueError(f"eval_workers = {workers} but the Ray cluster has {gpus:g} GPUs (one each)")
    if workers > cpus:
        raise ValueError(f"eval_workers = {workers} but the Ray cluster has {cpus:g} CPU slots (one each)")


def start_remote(
    s: Settings,
    *,
    model: ModelConfig,
    eval_cfg: EvalConfig,
    codec: CodecConfig,
    ledger: Ledger,
    metrics: Metrics | None = None,
) -> RemoteEvaluation | None:
    """The round's evaluation on workers, or None to evaluate in-process (`eval_workers` = 0)."""
    pool = start_pool(s, worker_spec(s, model, eval_cfg, codec), metrics)
    return None if pool is None else RemoteEvaluation(pool, ledger)
