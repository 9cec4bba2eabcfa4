"""The suite's scheduling (tests/parallel.py): tests that use or stop the shared services share one
scope, so two workers never race on PostgreSQL or Redis."""

from __future__ import annotations

from tests.parallel import scope_of


def test_modules_that_stop_or_use_the_services_share_one_scope() -> None:
    stoppers = ("test_storage_resilience.py", "test_faults.py")
    for module in (*stoppers, "test_api_schema.py", "test_bench_faults.py"):
        assert scope_of(f"tests/{module}::test_x") == "services", module


def test_pure_modules_are_scopes_of_their_own() -> None:
    assert scope_of("tests/test_codec.py::test_x[1]") == "tests/test_codec.py"
    assert scope_of("tests/test_round_e2e.py::t") == scope_of("tests/test_selection_document.py::t")


def test_the_benchmarks_quick_runs_are_scopes_of_one_test_each() -> None:
    ids = [f"tests/test_benchmarks.py::test_quick[{name}]" for name in ("bench_codec", "bench_loss_score")]
    assert [scope_of(i) for i in ids] == ids
    # those that use the shared PostgreSQL or Redis themselves run with the services
    for name in ("bench_api", "bench_storage"):
        assert scope_of(f"tests/test_benchmarks.py::test_quick[{name}]") == "services", name
