"""Driving the `gauntlet` command in-process: exit code, stdout and stderr, a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from validator.cli.main import main


class Result(NamedTuple):
    """(code, out, err) of one in-process `gauntlet` call; unpacks like a tuple."""

    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def call(args: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    argv = sys.argv
    sys.argv = ["gauntlet", *args]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        sys.argv = argv
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def assert_one_line(result: Result, code: int, *fragments: str) -> None:
    """The error contract: exactly one line on stderr, naming the problem, and the exit code."""
    assert result.code == code, result
    assert len(result.err_lines) == 1, result.err
    line = result.err_lines[0]
    assert "Traceback" not in result.err and line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No GAUNTLET_ variable of the machine running the tests leaks into a command."""
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)
    yield monkeypatch


GAUNTLET = str(Path(sys.executable).parent / "gauntlet")
# The README's demo command, less --windows and --workdir.
DEMO_ARGS = ["--no-api", "--json", "--peers", "honest:2,malformed:1", "--inner-steps", "3"]


def gauntlet(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`gauntlet` as a child process, as an operator runs it: no GAUNTLET_ variable but `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GAUNTLET_")}
    return subprocess.run(
        [GAUNTLET, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=clean | env, check=False
    )


@dataclass(frozen=True, slots=True)
class DemoRun:
    workdir: Path
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def readme_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The README's demo command on SQLite, two windows with a *relative* --workdir, run once per
    session: test_cli checks its summary and replay, test_cli_demo what an operator does next."""
    base = tmp_path_factory.mktemp("readme-demo")
    result = gauntlet(["demo", "--windows", "2", *DEMO_ARGS, "--workdir", "run"], base)
    assert result.returncode == 0, result.stderr[-2000:]
    return DemoRun(base / "run", result)
