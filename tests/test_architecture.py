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


# validator/ grouped by concern, lowest layer first: a package imports its own modules and lower
# layers, never a higher one (the CLI, at the top, wires everything; the stores know nothing of rounds).
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer)
    for layer in (
        {"settings", "telemetry"},
        {"stores"},
        {"chain"},
        {"state"},
        {"workers"},
        {"round"},
        {"wiring", "service"},
        {"demo"},
        {"cli"},
    )
)
MAX_TOP_LEVEL = 12


def _unit(path: Path) -> str:
    """The concern a validator module belongs to: its sub-package, or its own name at the top."""
    return path.relative_to(ROOT / "validator").with_suffix("").parts[0]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _validator_imports(path: Path) -> set[str]:
    """Every `validator.…` module imported anywhere in the file, function-level imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("validator."))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("validator.")
        ):
            assert node.module is not None
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # `from pkg import module`
    return found


def test_validator_top_level_stays_small() -> None:
    top = [p.name for p in (ROOT / "validator").iterdir() if p.name not in {"__init__.py", "__pycache__"}]
    assert len(top) <= MAX_TOP_LEVEL, sorted(top)


def test_validator_layers_never_import_upwards() -> None:
    layer_of = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    sources = _sources("validator")
    units = {_unit(p) for p in sources if p.name != "__init__.py" or p.parent != ROOT / "validator"}
    assert units <= layer_of.keys(), f"give these a layer: {sorted(units - layer_of.keys())}"
    upward = []
    for path in sources:
        mine = layer_of.get(_unit(path))
        for target in _validator_imports(path):
            theirs = layer_of.get(target.split(".")[1])
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not upward, upward


def test_validator_has_no_import_cycle() -> None:
    modules = {_module(p): p for p in _sources("validator")}
    graph = {m: {t for t in _validator_imports(p) if t in modules and t != m} for m, p in modules.items()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles: list[str] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join([*path[path.index(t) :], t]))
            elif t not in state:
                visit(t, [*path, t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


# Issue 13: a call wider than this usually hides values that travel together (give them a type).
# The CLI is exempt: its commands mirror their options. The two exceptions, and why:
MAX_PARAMS = 6
WIDE_ALLOWED = {
    # each keyword is one field of the signed file metadata (DESIGN §4), given once by every caller
    "scoring/encoder.py:encode_submission",
    "scoring/encoder.py:signed_file",
}


def _wide_functions() -> set[str]:
    wide = set()
    for package in ("validator", "scoring", "storage", "api"):
        for path in _sources(package):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("validator/cli/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    a = node.args
                    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]
                    if names[:1] in (["self"], ["cls"]):
                        names = names[1:]
                    if len(names) > MAX_PARAMS:
                        wide.add(f"{rel}:{node.name}")
    return wide


def test_functions_take_at_most_six_parameters() -> None:
    # the allowed list is exact: a function fixed since is struck off it
    assert _wide_functions() == WIDE_ALLOWED and len(WIDE_ALLOWED) <= 2
