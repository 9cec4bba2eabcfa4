"""Suite-wide setup. bittensor writes under ~/.bittensor at import: point HOME at a temp folder first."""

from __future__ import annotations

import os
import tempfile

os.environ["HOME"] = tempfile.mkdtemp(prefix="gauntlet-test-home-")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

torch.set_num_threads(1)

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

# Fixture modules shared across test files: registered here once, so a test names the fixture it
# needs and nothing re-exports it (helpers in these modules are imported normally). A module comes
# after those it imports, so pytest can rewrite its asserts before anything imports it.
pytest_plugins = (
    "tests.storage_fixtures",
    "tests.cli_fixtures",
    "tests.api_fixtures",
    "tests.worker_fixtures",
    "tests.parallel",
)


@pytest.fixture(scope="session")
def full_scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The demo's scenario with every adversary, run once and shared by the end-to-end tests."""
    from tests.e2e_fixtures import clear_gauntlet_env, run_scenario

    clear_gauntlet_env()
    yield run_scenario(tmp_path_factory.mktemp("e2e") / "demo")


@pytest.fixture(scope="session")
def fault_reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The small scenario (fault_fixtures.SCENARIO) run uninterrupted on SQLite, once per session:
    the crash-restart, kill-restart and Postgres-outage tests each compare their committed windows
    with it instead of running their own."""
    from tests.fault_fixtures import REFERENCE_WINDOWS, gauntlet_env, make_runner, run_windows

    with gauntlet_env():
        runner = make_runner(tmp_path_factory.mktemp("reference") / "demo")
        run_windows(runner, REFERENCE_WINDOWS)
    yield runner
    runner.round.ledger.engine.dispose()
