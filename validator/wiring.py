"""Build the validator from process settings: the one place where every part is constructed and joined."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic import SecretBytes, SecretStr
from redis import Redis

from scoring.checkpoint import load_checkpoint
from scoring.data import MANIFEST_NAME, Dataset
from scoring.eval_plan import EvalConfig
from scoring.loss_score import LossScoreConfig
from scoring.model import LlamaModel, ModelConfig, build_model, param_spec, select_device
from scoring.persistence import PersistenceConfig
from scoring.ranking import RatingConfig
from scoring.selection import SelectionConfig
from scoring.signing import Signer, dev_keypair
from scoring.weights import PowerWeights, PowerWeightsConfig, RankWeights, RankWeightsConfig, WeightPolicy
from scoring.wire import CodecConfig, max_submission_bytes
from storage import migrate
from storage.archive import ArchiveConfig, BlobStore, LocalBlobStore, ObjectBlobStore, SubmissionArchive
from storage.db import make_engine
from validator.chain.protocol import BLOCK_SECONDS, Chain, WindowConfig
from validator.round.check_config import CheckConfig
from validator.round.config import RoundConfig
from validator.round.lock_keeper import LOCK_TTL_WINDOWS
from validator.round.loop import Judging, Round, WindowState
from validator.round.publishing import SelectionPublisher
from validator.round.rating import RankingConfig
from validator.round.weighing import Weigher, WeightSchedule
from validator.settings import Settings
from validator.state.leader_lease import LeaseLock
from validator.state.ledger import Ledger
from validator.state.scratch import Scratch
from validator.stores.commitments import LocationPolicy, StorageLocation, parse_location
from validator.stores.objstore import FetchConfig, Fetcher, open_store
from validator.telemetry.events import LeaderLock, Lock, NullEvents, RedisEvents, connect
from validator.telemetry.holder import Holder, holder_id
from validator.telemetry.metrics import Metrics
from validator.workers.setup import start_remote


def code_version() -> str:
    try:
        return version("gauntlet-validator")
    except PackageNotFoundError:  # running from a checkout without installing
        return "0+unknown"


# Where things run and how they are served does not change a window's results; the rest does.
OPERATIONAL = frozenset({
    "workdir", "database_url", "redis_url", "archive_url", "archive_retention_windows", "selection_location",
    "metrics_port", "api_host", "api_port", "cors_origins", "rate_limit_per_minute", "api_max_commit_age_s",
    "wallet_path", "device", "fetch_deadline_s", "dataset_path", "model_path",  # paths, not contents
    "eval_workers", "eval_ray_address",  # where evaluation runs, not what it computes
    "archive_access_key_id", "archive_secret_access_key", "selection_access_key_id",
    "selection_secret_access_key",  # who may write, not what is computed
})  # fmt: skip


def config_digest(settings: Settings, dataset: Dataset | None = None) -> str:
    """A digest of the settings that decide a window's results, stored with every window, so two
    windows scored under different rules are told apart (operational settings are left out), and
    of the dataset's manifest (its shards' digests): `dataset_path` is a path, and a rebuilt or
    other corpus changed every score under the same settings."""
    relevant: dict[str, object] = {k: v for k, v in settings.masked().items() if k not in OPERATIONAL}
    if dataset is not None:
        relevant["dataset_manifest"] = dataset.manifest.to_json()
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def round_config(s: Settings, dataset: Dataset | None = None) -> RoundConfig:
    return RoundConfig(
        check=CheckConfig(
            codec=CodecConfig(),
            norm_outlier_factor=s.norm_outlier_factor,
            clip_quantile=s.clip_quantile,
            clip_cap=s.clip_cap,
            recycled_windows=s.recycled_windows,
        ),
        eval=EvalConfig(
            public_seed=s.public_seed,
            pages_per_peer=s.pages_per_peer,
            eval_pages=s.eval_pages,
            heldout_pages=s.heldout_pages,
            batch_size=s.batch_size,
            budget=s.eval_budget,
            loss=LossScoreConfig(eval_lr_factor=s.eval_lr_factor, outer_lr=s.outer_lr),
        ),
        ranking=RankingConfig(
            rating=RatingConfig(bma_warmup=s.bma_warmup, bma_threshold=s.bma_threshold),
            selection=SelectionConfig(
                gather_peers=s.gather_peers,
                reserve_peers=s.reserve_peers,
                max_inflation=s.max_inflation,
                min_retention=s.min_retention,
            ),
            persistence=PersistenceConfig(
                enabled=s.persistence_sketches, bits=s.persistence_bits, gate=s.persistence_gate
            ),
        ),
        window=WindowConfig(s.blocks_per_window),
        secret=SecretBytes(s.validator_secret.get_secret_value().encode()),
        outer_lr=s.outer_lr,
        fetch_deadline_s=s.fetch_deadline_s,
        put_window_s=s.put_window_s,
        put_grace_s=s.put_grace_s,
        config_digest=config_digest(s, dataset),
        code_version=code_version(),
    )


def weight_policy(s: Settings) -> WeightPolicy:
    if s.weight_policy == "power":
        return PowerWeights(PowerWeightsConfig(burn_uid=s.burn_uid, burn_share=s.burn_share))
    return RankWeights(RankWeightsConfig(burn_uid=s.burn_uid, burn_share=s.burn_share))


def open_dataset(s: Settings) -> Dataset:
    """The token shards the validator draws pages from; ValueError saying what is missing or unreadable."""
    if s.dataset_path is None:
        hint = "or GAUNTLET_CONFIG naming a TOML file with dataset_path (a demo's: WORKDIR/gauntlet.toml)"
        raise ValueError(f"GAUNTLET_DATASET_PATH is required (token shards with manifest.json), {hint}")
    root = Path(s.dataset_path)
    if not (root / MANIFEST_NAME).is_file():
        missing = f"{MANIFEST_NAME} is missing (build one: gauntlet data build)"
        raise ValueError(f"no dataset at {root.resolve()}: {missing}")
    try:
        return Dataset.open(root, seq_len=s.seq_len)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"cannot open the dataset at {root.resolve()}: {type(e).__name__}: {e}") from e


def load_model(s: Settings, dataset: Dataset) -> LlamaModel:
    """The global model on the configured device (CUDA when present and `device=auto`), fp32."""
    device = select_device(s.device)
    if s.model_path is not None:
        return load_checkpoint(s.model_path, device=device)
    return build_model(
        ModelConfig.tiny(vocab_size=dataset.manifest.vocab_size), seed=s.model_seed, device=device
    )


def bucket(url: str, key_id: str | None, secret: SecretStr | None) -> StorageLocation:
    """One of the validator's own buckets; credentials from settings (env, `*_FILE`) win over the URL's."""
    loc = parse_location(url, LocationPolicy.local())
    if key_id is None or secret is None:
        return loc
    return replace(loc, access_key_id=key_id, secret_access_key=secret.get_secret_value())


def publisher(s: Settings, signer: Signer | None) -> SelectionPublisher:
    if s.selection_location is None:
        return SelectionPublisher()
    creds = (s.selection_access_key_id, s.selection_secret_access_key)
    return SelectionPublisher(bucket(s.selection_location, *creds), signer)


def blob_store(s: Settings) -> BlobStore:
    """Archive and checkpoints: a folder under the workdir, or the S3 bucket of `archive_url`."""
    if s.archive_url is None:
        return LocalBlobStore(Path(s.workdir) / "blobs")
    loc = bucket(s.archive_url, s.archive_access_key_id, s.archive_secret_access_key)
    if loc.is_file:
        return LocalBlobStore(loc.path)
    return ObjectBlobStore(open_store(loc))


def open_ledger(s: Settings, *, migrate_to_head: bool = True) -> Ledger:
    """Storage for the validator: the database (migrated to head), the archive and checkpoints.

    Replay only reads: it refuses a database that is not at head instead of migrating it."""
    engine = make_engine(s.database_url)
    if migrate_to_head:
        migrate.upgrade(engine)
    elif migrate.current(engine) != migrate.head():
        raise LookupError("the database is not at the code's schema revision: run `gauntlet db upgrade`")
    blobs = blob_store(s)
    retention = s.archive_retention_windows or None
    archive = SubmissionArchive(blobs, ArchiveConfig(retention_windows=retention))
    ledger = Ledger(engine, blobs, archive, checkpoint_every=s.checkpoint_every)
    ledger.scratch = Scratch(Path(s.workdir) / "tmp").path  # held (locked) for the process's life
    return ledger


def fetch_config(s: Settings, max_bytes: int, locations: LocationPolicy) -> FetchConfig:
    return FetchConfig(
        max_bytes=max_bytes,
        put_window_s=s.put_window_s,
        grace_s=s.put_grace_s,
        peer_budget_s=min(s.fetch_peer_budget_s or s.fetch_deadline_s / 4, s.fetch_deadline_s),
        allow_private_hosts=locations.allow_private_hosts,  # local subnets serve peers on loopback
        # wall-clock polls observe uploads only beside a real chain, whose block times are wall clock
        poll_interval_s=s.upload_poll_s if s.chain == "subtensor" else 0.0,
        poll_host_rate=s.poll_host_rate,
        window_s=s.blocks_per_window * BLOCK_SECONDS,
        spool_dir=Path(s.workdir) / "spool",  # submissions stream to disk, never whole in memory
        sightings_dir=Path(s.workdir) / "sightings",  # the polls' evidence outlives a restart
        # a store a peer may run itself sets its own ETag and Last-Modified (fetch_types.py)
        stores_trusted=bool(locations.allowed_host_suffixes) or s.chain != "subtensor",
    )


@dataclass(frozen=True, slots=True)
class ChainLink:
    """The chain and the validator on it: its hotkey, the storage locations it accepts, its signer."""

    chain: Chain
    hotkey: str | None
    locations: LocationPolicy
    signer: Signer | None = None


def chain_for(s: Settings) -> ChainLink:
    """The configured chain: a subnet through the SDK (`chain=subtensor`), or the local demo chain."""
    if s.chain == "subtensor":
        from validator.chain.subtensor import SubtensorChain, SubtensorChainConfig

        sub = SubtensorChain(
            SubtensorChainConfig(
                network=s.network,
                netuid=s.netuid,
                wallet_name=s.wallet_name,
                hotkey_name=s.wallet_hotkey,
                wallet_path=str(s.wallet_path) if s.wallet_path else None,
            )
        )
        policy = LocationPolicy(allowed_host_suffixes=tuple(s.storage_host_suffixes))
        return ChainLink(sub, sub.hotkey, policy, sub.signer)
    from validator.chain.local import LocalChain, LocalChainConfig

    signer = dev_keypair(s.local_validator_uri)  # the demo registers this key as uid 0
    path = Path(s.workdir) / "chain.sqlite"
    local = LocalChain(LocalChainConfig(path, validator_hotkey=signer.ss58_address, auto_advance=False))
    return ChainLink(local, signer.ss58_address, LocationPolicy.local(), signer)


def leader_lock(s: Settings, ledger: Ledger, redis: Redis | None, hotkey: str) -> Lock:
    """Who sets weights for `hotkey`: the Redis lock, or without Redis the database's lease (two
    processes on one database both led before). The holder is the work folder's own random id and
    this process's incarnation (validator/telemetry/holder.py): a round rebuilt in this process
    renews its lock at once, a restarted process takes it over once it has gone unrenewed for half
    its TTL, and a host started from a copy of the work folder never while the original renews it."""
    holder = Holder(holder_id(Path(s.workdir)))
    # renewed every window (and between, while a window runs long: validator/round/lock_keeper.py)
    ttl = int(LOCK_TTL_WINDOWS * s.blocks_per_window * BLOCK_SECONDS)
    if redis is not None:
        return LeaderLock(redis, hotkey, ttl_s=ttl, holder=holder)
    return LeaseLock(ledger.engine, hotkey, ttl_s=ttl, holder=holder, db=ledger.db)


def build_round(
    s: Settings,
    link: ChainLink,
    *,
    dataset: Dataset,
    model: LlamaModel,
    start_window: int,
    metrics: Metrics | None = None,
) -> tuple[Round, WindowState]:
    """Connect storage (migrating it), join the stages, and restore where the next window starts:
    the model (loaded into `model`'s memory) and the ratings."""
    ledger = open_ledger(s)
    cfg = round_config(s, dataset)
    gm, ratings = ledger.restore(model, start_window=start_window, outer_lr=s.outer_lr, codec=cfg.check.codec)
    redis = connect(s.redis_url)
    events = RedisEvents(redis) if redis is not None else NullEvents()
    metrics = metrics or Metrics()
    lock = leader_lock(s, ledger, redis, link.hotkey or "local")
    schedule = WeightSchedule(
        s.windows_per_weights,
        retry_pending=ledger.last_weights_failed(),
        paid_since=ledger.last_weights_set(),
        stored=lambda: (ledger.last_weights_set(), ledger.last_weights_failed()),
    )
    weigher = Weigher(link.chain, weight_policy(s), lock, ledger.record_weights, schedule, metrics)
    cap = max_submission_bytes(param_spec(model), cfg.check.codec)
    remote = start_remote(
        s, model=model.cfg, eval_cfg=cfg.eval, codec=cfg.check.codec, ledger=ledger, metrics=metrics
    )  # None unless eval_workers > 0 (docs/cluster.md)
    rnd = Round(
        chain=link.chain,
        fetcher=Fetcher(fetch_config(s, cap, link.locations)),
        locations=link.locations,
        dataset=dataset,
        ledger=ledger,
        weigher=weigher,
        cfg=cfg,
        validator_hotkey=link.hotkey,
        events=events,
        metrics=metrics,
        publisher=publisher(s, link.signer),
        judging=Judging(remote=remote),
    )
    return rnd, WindowState(gm, ratings)
