"""Driving the `gauntlet` command in-process: exit code, stdout and stderr, a clean environment."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
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
