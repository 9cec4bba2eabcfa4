"""bench_faults' quick pass (the other benchmarks: tests/test_benchmarks.py). It compares its kill
run with the session's reference run (conftest.fault_reference, the same scenario, on the shared
PostgreSQL) instead of running one of its own, so it is scheduled with the services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from validator.demo.runner import DemoRunner

ROOT = Path(__file__).resolve().parent.parent


def test_bench_faults_quick_run_finds_nothing_lost_counted_twice_or_misjudged(
    fault_reference: DemoRunner, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")} | {"HOME": str(tmp_path)}
    reference = fault_reference.settings.database_url
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_faults", "--quick", "--reference", reference],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["lost_windows"] == 0 and figures["duplicates"] == 0, figures
    assert figures["windows_equal_to_reference"] == figures["windows_committed"] == 2, figures
    assert figures["hostile_wrong_verdicts"] == 0, figures
    assert figures["poisoned_windows_committed"] == figures["poisoned_windows_run"], figures
