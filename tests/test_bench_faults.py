"""bench_faults' quick pass (the other benchmarks: tests/test_benchmarks.py). It compares its kill
run with the session's reference run (conftest.fault_reference, the same scenario, on the shared
PostgreSQL) instead of running one of its own, so it is scheduled with the services."""

from __future__ import annotations

from pathlib import Path

from tests.bench_fixtures import figures_of
from validator.demo.runner import DemoRunner


def test_bench_faults_quick_run_finds_nothing_lost_counted_twice_or_misjudged(
    fault_reference: DemoRunner, tmp_path: Path
) -> None:
    reference = fault_reference.settings.database_url
    figures = figures_of("bench_faults", ["--quick", "--reference", reference], tmp_path)
    assert figures["lost_windows"] == 0 and figures["duplicates"] == 0, figures
    assert figures["windows_equal_to_reference"] == figures["windows_committed"] == 2, figures
    assert figures["hostile_wrong_verdicts"] == 0, figures
    assert figures["poisoned_windows_committed"] == figures["poisoned_windows_run"], figures
