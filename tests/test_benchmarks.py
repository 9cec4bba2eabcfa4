"""Every benchmark still runs: a --quick pass of each ends with one JSON line of figures.

The figures themselves are measured by running the scripts without --quick (see the README)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))


@pytest.mark.parametrize("script", BENCHMARKS)
def test_benchmark_quick_run_prints_a_json_line(script: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")} | {"HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert isinstance(figures, dict) and figures
