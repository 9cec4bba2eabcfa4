"""Import directions and file sizes (STYLE.md §8): the layering is checked, not hoped for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("validator", "scoring", "storage", "api", "migrations")
# package -> top-level modules it must never import
FORBIDDEN: dict[str, set[str]] = {
    "scoring": {"validator", "storage", "api", "sqlalchemy", "redis", "fastapi", "obstore"},
    "storage": {"validator", "scoring", "api", "torch"},
    "api": {"validator", "scoring", "torch"},
    "migrations": {"validator", "scoring", "api", "torch"},
    "validator": {"api"},
}
# The CLI is the one place that wires every part together, the API server included.
ENTRY_POINTS = {"validator/cli/main.py", "validator/cli/api.py"}
MAX_LINES = 300


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_import_directions(package: str) -> None:
    violations = []
    for path in _sources(package):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ENTRY_POINTS:
            continue
        bad = _imports(path) & FORBIDDEN[package]
        if bad:
            violations.append(f"{rel} imports {sorted(bad)}")
    assert not violations, violations


@pytest.mark.parametrize("package", PACKAGES)
def test_files_stay_small(package: str) -> None:
    big = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in _sources(package)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert not big, big


def test_no_unsafe_deserializers_outside_tests() -> None:
    pattern = re.compile(r"pickle\.loads?\(|torch\.load\(|yaml\.load\(|(?<![.\w])(eval|exec)\(")
    hits = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for package in PACKAGES
        for p in _sources(package)
        if (m := pattern.search(p.read_text()))
    ]
    assert not hits, hits
