"""Running a benchmark script as the README does (a module, from the repository root) and reading
its last line of figures: the benchmarks' quick passes in the suite (tests/test_benchmarks.py,
tests/test_bench_faults.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def figures_of(module: str, args: list[str], home: Path) -> dict[str, Any]:
    """`python -m benchmarks.<module> <args>` in a clean environment (no GAUNTLET_ settings, HOME at
    `home`); it must succeed, and its last line is one JSON object of figures."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")} | {"HOME": str(home)}
    result = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert isinstance(figures, dict) and figures
    return figures
