"""Every benchmark still runs: a --quick pass of each, as a module from the repository root (as
their usage lines show), ends with one JSON line of figures.

The figures themselves are measured by running the scripts without --quick (see the README).
bench_faults runs in tests/test_bench_faults.py, scheduled with the tests that use the shared
services (tests/parallel.py); every other benchmark here is a scope of its own (or runs with the
services when it uses them itself), so they spread over both workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_fixtures import ROOT, figures_of

BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py") if p.stem != "bench_faults")


@pytest.mark.parametrize("script", BENCHMARKS)
def test_benchmark_quick_run_prints_a_json_line(script: str, tmp_path: Path) -> None:
    figures = figures_of(script, ["--quick"], tmp_path)
    if script == "bench_outer_step":  # it measured the validator's own step, not one of its making
        assert figures["step_matches"] is True and figures["behaviours"]["honest"]["windows"] > 0, figures
    if script == "bench_scale":  # verdicts too: workers and the stored replay change no result
        assert figures["identical"] is True and figures["worker_kill_recovered"] is True, figures
        assert figures["memory"]["identical"] is True, figures


def test_gpu_check_runs_on_a_cpu(tmp_path: Path) -> None:
    """gpu_check.sh runs only where a GPU is lent; its --smoke pass keeps the script in step with the
    code it measures (a tiny model on the CPU, the worker part left to the Ray tests)."""
    args = ["--smoke", "--skip-workers", "--peers", "1", "--batch", "1", "--seq", "16"]
    figures = figures_of("gpu_check", args, tmp_path)
    assert figures["params"] > 0 and figures["decode"]["wire_bytes"] > 0, figures
    assert figures["loss_score"]["ratio_to_four_forwards"] > 0, figures
