"""Process settings: one typed object from a TOML file plus `GAUNTLET_` environment variables.

Precedence: explicit arguments > environment > TOML file (`GAUNTLET_CONFIG=path.toml`) > defaults.
Secrets are `SecretStr` (never logged; `gauntlet config show` masks them) and can come from files
via `*_FILE` variables. Invalid values fail at start with a message that names the field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from sqlalchemy.engine import make_url

from scoring.consensus import OUTER_LR

DEV_SECRET = "gauntlet-dev-secret-not-for-production"  # noqa: S105 (refused on a real subnet)
SECRET_FILE_FIELDS = (
    "validator_secret", "database_url", "redis_url", "archive_access_key_id", "archive_secret_access_key",
    "selection_access_key_id", "selection_secret_access_key",
)  # fmt: skip


PATH_FIELDS = ("workdir", "dataset_path", "model_path", "wallet_path")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GAUNTLET_", extra="forbid", validate_default=True)

    # where things live
    workdir: Path = Path("gauntlet-data")
    database_url: str = "sqlite:///gauntlet.db"
    redis_url: str | None = "redis://127.0.0.1:6379/0"
    archive_url: str | None = None  # None: a folder under workdir; else an S3 URL (commitment syntax)
    # bounded by default (≈ 15 h of 23-minute windows); 0 keeps everything and grows without bound
    archive_retention_windows: int = Field(default=40, ge=0)
    storage_host_suffixes: list[str] = []  # trusted peer storage providers (empty: any public host)
    allow_any_storage_host: bool = False  # a real subnet with no suffixes must say so explicitly
    upload_poll_s: float = Field(default=2.0, gt=0)  # HEAD polls observing uploads (real subnets)
    # with allow_any_storage_host, at most this many polls a second to one host (0: no cap)
    poll_host_rate: float = Field(default=32.0, ge=0)
    selection_location: str | None = None  # where the signed selection is published (commitment syntax)
    # Write credentials of those two buckets, kept out of the URLs (and so out of config files):
    # GAUNTLET_ARCHIVE_SECRET_ACCESS_KEY or GAUNTLET_ARCHIVE_SECRET_ACCESS_KEY_FILE, and so on.
    archive_access_key_id: str | None = None
    archive_secret_access_key: SecretStr | None = None
    selection_access_key_id: str | None = None
    selection_secret_access_key: SecretStr | None = None
    metrics_port: int | None = Field(default=9108, ge=1, le=65535)  # Prometheus for `gauntlet run`

    # the chain
    chain: Literal["local", "subtensor"] = "local"
    network: str = "finney"
    netuid: int = Field(default=3, ge=0)
    wallet_name: str = "default"
    wallet_hotkey: str = "default"
    wallet_path: Path | None = None
    local_validator_uri: str = "//gauntlet-demo-validator"  # dev key of the validator on a local chain
    blocks_per_window: int = Field(default=115, ge=1)
    windows_per_weights: int = Field(default=3, ge=1)
    put_window_s: float = Field(default=70.0, gt=0)
    put_grace_s: float = Field(default=5.0, ge=0)
    fetch_deadline_s: float = Field(default=120.0, gt=0)
    # one peer's download budget; None: a quarter of the deadline. Size it for the largest honest
    # file at the slowest bandwidth you accept (a 2 GB submission at 50 MB/s needs 40 s)
    fetch_peer_budget_s: float | None = Field(default=None, gt=0)

    # the model, data and evaluation
    model_path: Path | None = None  # a Hugging Face LLaMA checkpoint folder; None: random init
    model_seed: int = 0
    dataset_path: Path | None = None
    seq_len: int = Field(default=64, ge=8)
    device: str = "auto"
    public_seed: str = "gauntlet"
    validator_secret: SecretStr = SecretStr(DEV_SECRET)
    # two pages a side at least: the proof's page test reads their spread (scoring/page_test.py)
    pages_per_peer: int = Field(default=16, ge=2)
    eval_pages: int = Field(default=8, ge=2)
    heldout_pages: int = Field(default=8, ge=2)
    batch_size: int = Field(default=8, ge=1)
    eval_budget: int = Field(default=256, ge=0)  # peers evaluated per window at most
    # evaluation workers (docs/cluster.md): 0 evaluates in this process, N > 0 on N Ray workers (a
    # local runtime, or the cluster at eval_ray_address, e.g. "ray://head:10001" or "auto")
    eval_workers: int = Field(default=0, ge=0)
    eval_ray_address: str | None = None
    eval_lr_factor: float = Field(default=0.2, gt=0)
    outer_lr: float = Field(default=OUTER_LR, gt=0)
    norm_outlier_factor: float = Field(default=10.0, gt=1)
    clip_quantile: float = Field(default=0.75, ge=0.5, lt=1)  # of proven peers' norms: the clip reference
    clip_cap: float = Field(default=2.0, ge=1)  # ... at most this × their median
    recycled_windows: int = Field(default=2, ge=0)  # earlier windows a submission must not repeat
    checkpoint_every: int = Field(default=10, ge=1)

    # ranking and selection
    gather_peers: int = Field(default=20, ge=1)
    reserve_peers: int = Field(default=10, ge=0)
    max_inflation: float = Field(default=1.25, ge=1)  # not aggregated above this × the clip reference
    min_retention: float = Field(default=0.93, ge=0, lt=1)  # nor under this × the median retention
    # the persistence check (scoring/persistence.py): sketches stored per peer and window (2^bits
    # float16 values: 32 KiB at 14), the figures on the API, and with the gate on not aggregated
    persistence_sketches: bool = True
    persistence_bits: int = Field(default=14, ge=8, le=24)
    persistence_gate: bool = True
    bma_warmup: int = Field(default=10, ge=0)
    bma_threshold: float = Field(default=0.10, ge=0)
    weight_policy: Literal["rank", "power"] = "rank"
    burn_uid: int | None = Field(default=None, ge=0, le=65535)  # a uid the chain can name
    burn_share: float = Field(default=0.0, ge=0, le=1)

    # the API
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)
    cors_origins: list[str] = []
    rate_limit_per_minute: int = Field(default=600, ge=0)  # 0 turns the limit off
    api_max_commit_age_s: float | None = Field(default=None, gt=0)  # /readyz fails past this age
    api_trusted_proxies: list[str] = []  # addresses whose X-Forwarded-For is believed (api/README.md)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = os.environ.get("GAUNTLET_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, file_secret_settings]
        if toml:
            if not Path(toml).is_file():  # a typo must not silently start with the defaults
                raise ValueError(f"GAUNTLET_CONFIG: no such file {toml}")
            sources.append(RelativeToFileToml(settings_cls, toml_file=Path(toml)))
        return tuple(sources)

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        """`GAUNTLET_<FIELD>_FILE` reads a secret from a file (e.g. a container secret)."""
        for field in SECRET_FILE_FIELDS:
            path = os.environ.get(f"GAUNTLET_{field.upper()}_FILE")
            if path and isinstance(data, dict):
                data = {**data, field: Path(path).read_text().strip()}
        return data

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, v: str) -> str:
        if not v.startswith(("sqlite", "postgresql")):
            raise ValueError("database_url must be a sqlite:// or postgresql+psycopg:// URL")
        return v

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        if self.chain == "subtensor" and self.validator_secret.get_secret_value() == DEV_SECRET:
            raise ValueError("validator_secret: set a real secret before running on a real subnet")
        for bucket in ("archive", "selection"):
            if (getattr(self, f"{bucket}_access_key_id") is None) != (
                getattr(self, f"{bucket}_secret_access_key") is None
            ):
                raise ValueError(f"{bucket}_access_key_id and {bucket}_secret_access_key go together")
        if self.chain == "subtensor" and not self.storage_host_suffixes and not self.allow_any_storage_host:
            # any public host means stores run by peers themselves: set the providers you trust
            raise ValueError("storage_host_suffixes: list trusted providers, or set allow_any_storage_host")
        if self.burn_uid is None and self.burn_share > 0:
            raise ValueError("burn_share needs burn_uid")
        if self.eval_ray_address and self.eval_workers == 0:
            raise ValueError("eval_ray_address is set but eval_workers is 0: say how many workers to start")
        if 0 < self.archive_retention_windows < 2 * self.checkpoint_every:
            # rebuilding the model needs the aggregated submissions since the last checkpoint
            raise ValueError("archive_retention_windows must be 0 or at least 2 × checkpoint_every")
        return self

    def masked(self) -> dict[str, Any]:
        """The effective configuration with secrets and URL passwords hidden."""
        out = self.model_dump(mode="json")
        out["validator_secret"] = "*" * 10
        for key in ("database_url", "redis_url", "archive_url", "selection_location"):
            out[key] = _mask_url(out[key])
        return out


class RelativeToFileToml(TomlConfigSettingsSource):
    """A relative path in a TOML file is relative to that file, not to wherever a command runs
    (`GAUNTLET_CONFIG=demo/gauntlet.toml gauntlet replay 3` from any folder finds the same data)."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        data = super()._read_file(file_path)
        folder = Path(str(file_path)).resolve().parent
        for key in PATH_FIELDS:
            if isinstance(data.get(key), str) and not Path(data[key]).expanduser().is_absolute():
                data[key] = str(folder / data[key])
        url = data.get("database_url")
        if isinstance(url, str) and url.startswith("sqlite"):
            parsed = make_url(url)
            if parsed.database and parsed.database != ":memory:" and not Path(parsed.database).is_absolute():
                data["database_url"] = parsed.set(database=str(folder / parsed.database)).render_as_string(
                    hide_password=False
                )
        return data


def to_toml(settings: Settings) -> str:
    """A TOML file that `GAUNTLET_CONFIG` can load again (secrets and unset values left out)."""
    lines = []
    for key, value in settings.model_dump(mode="json").items():
        if value is None or isinstance(getattr(settings, key), SecretStr):
            continue
        lines.append(f"{key} = {json.dumps(value)}")  # JSON scalars and string lists are valid TOML
    return "\n".join(lines) + "\n"


def _mask_url(url: str | None) -> str | None:
    """Hide the password part of `scheme://user:password@host`."""
    if not url or "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:****@{host}"
