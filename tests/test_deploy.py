"""The deployment files: compose, systemd units, Dockerfile and sample configuration stay coherent.

Static checks plus the real `Settings` class and the real `gauntlet config show` command against the
sample configuration; tests/test_image.py builds and runs the image, deploy/stack-check.sh the stack.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from validator.settings import Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
EXAMPLE_TOML = DEPLOY / "gauntlet.example.toml"
UNITS = ("gauntlet-migrate", "gauntlet-validator", "gauntlet-api")
# GAUNTLET_ variables that are not fields: the TOML path (`GAUNTLET_<FIELD>_FILE` is checked apart).
NON_FIELD_VARS = {"GAUNTLET_CONFIG"}
# Fields the sample leaves commented out: TOML has no null and these default to None, or (the
# local chain's dev key) mean nothing on a real subnet. Secrets never appear in it at all.
COMMENTED_FIELDS = {
    "archive_url", "model_path", "burn_uid", "selection_location", "api_max_commit_age_s",
    "local_validator_uri", "fetch_peer_budget_s", "eval_ray_address",
}  # fmt: skip
# Credentials come from the environment or `*_FILE` files, never from the TOML file (0640).
CREDENTIAL_FIELDS = {
    name for name, field in Settings.model_fields.items()
    if "SecretStr" in str(field.annotation) or name.endswith("_access_key_id")
}  # fmt: skip
# `scheme://user:password@host`: credentials inside a URL.
URL_CREDENTIALS = re.compile(r"://[^/@\s\"]+:[^/@\s\"]+@")
SECRET = "test-secret-7f3a9c"


def _compose(name: str = "compose.yaml") -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (it comes with the test extra)")
    data = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(data, dict)
    return data


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string((DEPLOY / "systemd" / f"{name}.service").read_text())
    return parser


def _setting_vars(names: list[str]) -> set[str]:
    """The GAUNTLET_ names that are neither a Settings field nor a known non-field variable."""
    fields = {f"GAUNTLET_{f.upper()}" for f in Settings.model_fields}
    files = {f"{name}_FILE" for name in fields}  # a secret read from a file
    return {n for n in names if n.startswith("GAUNTLET_")} - fields - files - NON_FIELD_VARS


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)
    return monkeypatch


def test_compose_has_every_service_with_healthchecks() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", "redis", "migrate", "validator", "api"}
    for name in ("postgres", "redis", "api"):
        assert services[name]["healthcheck"]["test"], name
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert any("pgdata:" in v for v in services["postgres"]["volumes"])


def test_compose_orders_migrations_before_the_validator_and_api() -> None:
    services = _compose()["services"]
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("validator", "api"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["validator"]["command"] == ["run"]
    assert services["api"]["command"][:3] == ["api", "--host", "0.0.0.0"]


def test_compose_binds_no_host_port_on_every_interface() -> None:
    services = _compose()["services"]
    published = [(name, str(p)) for name, svc in services.items() for p in svc.get("ports", [])]
    assert published == [("api", "127.0.0.1:${API_PORT:-8000}:8000")]
    for name, port in published:
        assert port.startswith(("127.0.0.1:", "[::1]:")), f"{name} publishes {port} on all interfaces"


def test_compose_keeps_secrets_and_roles_apart() -> None:
    data = _compose()
    validator, api = data["services"]["validator"], data["services"]["api"]
    assert validator["secrets"] == ["validator_secret"]
    assert validator["environment"]["GAUNTLET_VALIDATOR_SECRET_FILE"] == "/run/secrets/validator_secret"
    assert data["secrets"]["validator_secret"]["file"]
    assert any(v.endswith(":/wallets:ro") for v in validator["volumes"])
    assert "gauntlet_api:" in api["environment"]["GAUNTLET_DATABASE_URL"]
    assert "gauntlet:" in validator["environment"]["GAUNTLET_DATABASE_URL"]
    assert "DB_OWNER_PASSWORD" not in str(api["environment"])
    assert "gpu" in (DEPLOY / "compose.yaml").read_text()  # the commented NVIDIA reservation


def test_deploy_files_name_only_real_settings() -> None:
    names = [k for svc in _compose()["services"].values() for k in svc.get("environment", {})]
    names += list(_compose("compose.localnet.yaml")["services"]["validator"]["environment"])
    env_lines = (DEPLOY / "env.example").read_text().splitlines()
    names += [m.group(1) for line in env_lines if (m := re.match(r"#?\s*(GAUNTLET_\w+)=", line))]
    for unit in UNITS:
        text = (DEPLOY / "systemd" / f"{unit}.service").read_text()
        names += re.findall(r"^Environment=(GAUNTLET_\w+)=", text, re.MULTILINE)
    assert "GAUNTLET_VALIDATOR_SECRET_FILE" in names
    assert "GAUNTLET_NETUID" in names
    assert _setting_vars(names) == set()


def test_example_toml_loads_through_settings_and_round_trips(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GAUNTLET_CONFIG", str(EXAMPLE_TOML))
    clean_env.setenv("GAUNTLET_VALIDATOR_SECRET", SECRET)  # chain = "subtensor" refuses the dev secret
    written = tomllib.loads(EXAMPLE_TOML.read_text())
    loaded = Settings().model_dump(mode="json")
    assert {k: loaded[k] for k in written} == written
    assert written["chain"] == "subtensor"
    assert "validator_secret" not in written


def test_example_toml_covers_every_field() -> None:
    text = EXAMPLE_TOML.read_text()
    written = set(tomllib.loads(text))
    missing = set(Settings.model_fields) - written - CREDENTIAL_FIELDS
    commented = COMMENTED_FIELDS & set(Settings.model_fields)
    assert missing == commented
    assert not CREDENTIAL_FIELDS & written
    for field in commented:
        assert re.search(rf"^# {field} = ", text, re.MULTILINE), field


def test_systemd_units_have_the_required_keys() -> None:
    migrate, validator, api = (_unit(n) for n in UNITS)
    assert migrate["Service"]["Type"] == "oneshot"
    assert "gauntlet-validator.service" in migrate["Unit"]["Before"]
    assert "/opt/gauntlet/venv/bin/gauntlet db upgrade && exit 0" in migrate["Service"]["ExecStart"]
    for unit in (validator, api):
        assert "gauntlet-migrate.service" in unit["Unit"]["Requires"]
        assert "gauntlet-migrate.service" in unit["Unit"]["After"]
    assert validator["Service"]["ExecStart"].endswith("gauntlet run")
    assert validator["Service"]["Restart"] == "on-failure"
    assert validator["Service"]["KillSignal"] == "SIGTERM"
    assert re.fullmatch(r"\d+min", validator["Service"]["TimeoutStopSec"])
    assert int(validator["Service"]["TimeoutStopSec"].removesuffix("min")) >= 10
    assert "--host 127.0.0.1" in api["Service"]["ExecStart"]
    for name, unit in zip(UNITS, (migrate, validator, api), strict=True):
        service = unit["Service"]
        assert "/etc/gauntlet/env" in (DEPLOY / "systemd" / f"{name}.service").read_text()
        assert service["NoNewPrivileges"] == "yes", name
        assert service["ProtectSystem"] == "strict", name
        assert service["PrivateTmp"] == "yes", name
        assert service["ReadWritePaths"].startswith("/var/lib/gauntlet"), name
        assert service["User"] not in ("root", "0"), name
        assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_dockerfile_runs_as_non_root_with_bounded_torch() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and all(u not in ("root", "0") for u in users)
    assert 'ENTRYPOINT ["gauntlet"]' in text
    spec = re.search(r'^ARG TORCH_SPEC="torch([^"]+)"', text, re.MULTILINE)
    assert spec is not None
    allowed = SpecifierSet(spec.group(1))
    assert Version("2.13.0") in allowed
    assert Version("2.14.0") not in allowed
    assert "download.pytorch.org/whl/cpu" in text and "download.pytorch.org/whl/cu128" in text
    api_stage = text.split("AS api", 1)[1].split("FROM ", 1)[0]
    assert "HEALTHCHECK" in api_stage and "/healthz" in api_stage


def _gauntlet(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "gauntlet"
    if not exe.exists():
        pytest.skip(f"the gauntlet console script is not installed beside {sys.executable}")
    base = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")}
    full = {**base, "HOME": str(tmp_path), "GAUNTLET_CONFIG": str(EXAMPLE_TOML), **env}
    return subprocess.run(
        [str(exe), "config", "show"], env=full, capture_output=True, text=True, timeout=60, check=False
    )


def test_config_show_masks_secrets(tmp_path: Path) -> None:
    url = "postgresql+psycopg://gauntlet:db-pass-91c2@db.internal:5432/gauntlet"
    done = _gauntlet({"GAUNTLET_VALIDATOR_SECRET": SECRET, "GAUNTLET_DATABASE_URL": url}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "db-pass-91c2" not in done.stdout + done.stderr
    assert '"database_url": "postgresql+psycopg://gauntlet:****@db.internal:5432/gauntlet"' in done.stdout
    assert '"netuid": 3' in done.stdout and '"chain": "subtensor"' in done.stdout


def test_config_show_names_an_invalid_field_and_exits_1(tmp_path: Path) -> None:
    done = _gauntlet({"GAUNTLET_VALIDATOR_SECRET": SECRET, "GAUNTLET_NETUID": "-1"}, tmp_path)
    assert done.returncode == 1
    assert "netuid" in done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_compose_rotates_every_services_logs() -> None:
    for name, svc in _compose()["services"].items():
        assert svc["logging"]["options"]["max-size"], name


def test_compose_keeps_public_images_as_defaults_and_lets_local_ones_in() -> None:
    services = _compose()["services"]
    assert services["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:17-bookworm}"
    assert services["redis"]["image"] == "${REDIS_IMAGE:-redis:7-bookworm}"
    for name in ("migrate", "api"):
        assert services[name]["build"]["args"]["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim-bookworm}"
    assert re.search(
        r"^ARG BASE_IMAGE=python:\$\{PYTHON_VERSION\}-slim-bookworm$", _dockerfile(), re.MULTILINE
    )


def test_example_configs_set_trusted_storage_hosts() -> None:
    validator = _compose()["services"]["validator"]["environment"]
    assert '".r2.cloudflarestorage.com"' in validator["GAUNTLET_STORAGE_HOST_SUFFIXES"]
    assert tomllib.loads(EXAMPLE_TOML.read_text())["storage_host_suffixes"]
    assert re.search(r"^GAUNTLET_STORAGE_HOST_SUFFIXES=\[\"", (DEPLOY / "env.example").read_text(), re.M)
    assert re.search(r"^STORAGE_HOST_SUFFIXES='\[\"", (DEPLOY / "compose.env.example").read_text(), re.M)


def test_example_configs_hold_no_credentials_in_urls_and_install_0640() -> None:
    for name in ("gauntlet.example.toml", "compose.yaml", "compose.localnet.yaml"):
        text = (DEPLOY / name).read_text()
        # compose.yaml fills its database URLs from ${...} variables, never literal passwords
        found = [m for m in URL_CREDENTIALS.findall(text) if "${" not in m]
        assert found == [], name
    guide = (DEPLOY / "README.md").read_text()
    assert re.search(r"install -m 0640 .*gauntlet\.example\.toml", guide)
    assert "-m 0644" not in guide


def test_systemd_api_unit_bounds_descriptors_and_names_trusted_proxies() -> None:
    api = _unit("gauntlet-api")
    assert int(api["Service"]["LimitNOFILE"]) >= 4096
    assert "GAUNTLET_API_TRUSTED_PROXIES" in (DEPLOY / "systemd" / "gauntlet-api.service").read_text()
    assert "api_trusted_proxies" in Settings.model_fields


def test_localnet_override_runs_the_demo_into_the_stack() -> None:
    validator = _compose("compose.localnet.yaml")["services"]["validator"]
    assert validator["command"][:2] == ["demo", "--no-api"]
    assert validator["restart"] == "no"


def _dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()
