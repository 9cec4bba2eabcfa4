"""The container image, built and run with podman: `deploy/local-images.sh` builds it (on base images
made from Debian packages, as registries are unreachable here), and the image runs the CLI and a
one-window demo as its non-root user on a read-only root filesystem, without a network.

Skipped where podman is missing or not usable as root (`.ci/run` installs it). The base images and
podman's layer cache persist between runs: a warm rebuild redoes only the project's layers (about a
minute); a cold one (debootstrap, base images, torch and the dependency tree) took 16 minutes on
this 2-core machine under load (deploy/README.md, section 9).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TAG = "ci"
IMAGE = f"localhost/gauntlet:{TAG}"
# runc and cgroupfs: crun refuses this host's hybrid cgroups; limits inside the host's hard limits.
PODMAN = ["podman", "--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
# The image as compose.yaml runs it: read-only root, writable /tmp and work folder, no privileges.
HARDENED = ["--read-only", "--tmpfs", "/tmp", "--security-opt", "no-new-privileges", "--cap-drop", "ALL"]

pytestmark = [
    pytest.mark.skipif(
        shutil.which("podman") is None, reason="podman is not installed (.ci/run installs it)"
    ),
    pytest.mark.skipif(
        not Path("/usr/sbin/runc").exists(), reason="runc is not installed (apt-get install runc)"
    ),
    pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0, reason="the podman checks run as root"),
    pytest.mark.skipif(
        not any(Path(os.environ.get("TORCH_WHEELS", "/opt/wheels")).glob("torch-2.13.*+cpu-cp311-*.whl")),
        reason="no local CPU torch 2.13 wheel for the build (set TORCH_WHEELS to a folder holding one)",
    ),
]


def _podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return _podman("run", "--rm", *LIMITS, *args, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The validator image of this checkout; base images and unchanged layers come from the cache."""
    env = {**os.environ, "IMAGE_TAG": TAG, "TARGETS": "validator"}
    done = subprocess.run(
        [str(REPO / "deploy" / "local-images.sh"), "app"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1700, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    yield IMAGE


def _project_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


@pytest.mark.timeout(1800)
def test_image_prints_its_version_as_a_non_root_user(image: str) -> None:
    done = _run(*HARDENED, "--network", "none", image, "--version", timeout=120)
    assert done.returncode == 0, done.stderr
    assert _project_version() in done.stdout
    user = _podman("image", "inspect", "--format", "{{.Config.User}}", image)
    assert user.stdout.strip() == "gauntlet"
    uid = _run("--entrypoint", "id", image, "-u", timeout=60)
    assert uid.stdout.strip() == "10001", uid.stderr


@pytest.mark.timeout(1800)
def test_image_runs_a_demo_window_offline_on_a_read_only_root(image: str) -> None:
    # an anonymous volume for the work folder (removed with the container); no network at all,
    # so nothing in the image may download a model, a tokenizer or data at run time; three peers
    # and three inner steps keep it short (the full default demo is the README's, not CI's)
    done = _run(
        *HARDENED, "--network", "none", "-v", "/var/lib/gauntlet", "-e", "OMP_NUM_THREADS=2",
        image, "demo", "--windows", "1", "--no-api", "--peers", "honest:2,copycat:1", "--inner-steps", "3",
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert re.search(r"^window 1\b", done.stderr, re.MULTILINE), done.stderr[-4000:]


@pytest.mark.timeout(1800)
def test_image_refuses_writes_outside_its_work_folder(image: str) -> None:
    done = _run(*HARDENED, "--network", "none", "--entrypoint", "sh", image, "-c", "touch /opt/x", timeout=60)
    assert done.returncode != 0
    assert "Read-only file system" in done.stderr
