"""ruff and `mypy --strict` are part of the suite: a type or lint error fails CI like a test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_ruff_check_and_format() -> None:
    check = _run(str(BIN / "ruff"), "check", ".")
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict() -> None:
    result = _run(str(BIN / "mypy"))  # packages and strictness come from pyproject.toml
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
