"""How the suite shares this machine's two cores (pytest-xdist: `-n 2 --dist loadscope`, with the
scopes below).

The suite is mostly single-threaded, so two workers nearly halve its wall time, but the real
PostgreSQL and Redis are shared, and some tests stop or restart them (tests/fault_fixtures.py,
test_storage_resilience.py). Every test that may touch either therefore runs in one scope,
`services`, on one worker, in collection order; every other module is a scope of its own (its
module fixtures are built once), and modules that share a costly session fixture share a scope.

The scope is decided on the controller, which sees only test ids, so it reads sources: a module is
in `services` when it names the services or requests a fixture that uses them (test_bench_faults.py
does: it compares with `fault_reference`). A module put there by mistake only runs serially; one
missed would run beside a test that stops the services. test_benchmarks.py runs one benchmark per
test: each is a scope of its own, or `services` when the benchmark's own source names them.
xdist's own `loadgroup` is not used: it passes groups by rewriting test ids, which pytest 9.2 no
longer honours, and it then spreads the tests silently (pytest-xdist issue #1386).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parent.parent
SERVICE_WORDS = re.compile(
    r"postgres|psycopg|pg_url|pg_admin|redis|6379|5432"
    # fixtures that use them, as tests request them
    r"|\b(?:db_url|pg_db|pg_server|fault_reference)\b|\bengine: Engine|\bclient: httpx\.Client",
    re.IGNORECASE,
)
# modules sharing a session fixture (conftest.full_scenario) run in one scope
SHARED = {"test_round_e2e": "e2e", "test_selection_document": "e2e"}
# modules of a few long, independent tests (a subprocess each, no module fixture): one scope per test,
# so they spread over both workers instead of queueing on one
PER_TEST = {"test_benchmarks"}


@functools.cache
def _names_services(path: Path) -> bool:
    return path.is_file() and bool(SERVICE_WORDS.search(path.read_text(encoding="utf-8")))


def scope_of(nodeid: str) -> str:
    """`services`, or the scope of the test `nodeid` (a path relative to the repository root)."""
    path = Path(nodeid.split("::", 1)[0])
    if _names_services(ROOT / path):
        return "services"
    if path.stem in PER_TEST:
        script = re.search(r"\[(\w+)\]$", nodeid)  # the benchmark a parametrised test runs
        if script and _names_services(ROOT / "benchmarks" / f"{script.group(1)}.py"):
            return "services"
        return nodeid
    return SHARED.get(path.stem, str(path))


class ServiceScopes(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ServiceScopes | None:
    return ServiceScopes(config, log) if config.getvalue("dist") == "loadscope" else None
