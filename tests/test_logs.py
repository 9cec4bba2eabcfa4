"""What reaches an operator's terminal: the standard library's log records are JSON lines too, and
the replay table escapes hotkeys, so nothing a peer or its server sent arrives as an escape sequence."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from validator.telemetry.logs import configure_logging, reset_logging

HOSTILE = "HTTP/1.1 200 OK\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\\x1b[1A\x1b[2K\x1b[31mFAKE\r"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging(stream=out)
    configure_logging(stream=out)  # configured twice (a CLI sub-command): still one line a record
    try:
        yield out
    finally:
        reset_logging()


def test_a_standard_library_record_is_one_escaped_json_line(stream: io.StringIO) -> None:
    logging.getLogger("api.http").warning("peer said %s", HOSTILE)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "\x1b" not in lines[0] and "\r" not in lines[0]
    record = json.loads(lines[0])
    assert record["event"] == f"peer said {HOSTILE}" and record["level"] == "warning"
    assert record["logger"] == "api.http" and "timestamp" in record


def test_httpx_request_lines_are_left_out_but_its_warnings_kept(stream: io.StringIO) -> None:
    logging.getLogger("httpx").info('HTTP Request: GET http://peer/ "%s"', HOSTILE)
    logging.getLogger("httpcore.http11").info("receive_response_headers.complete")
    logging.getLogger("httpx").warning("something the operator should see")
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert events == ["something the operator should see"]


def test_the_replay_table_prints_no_terminal_escapes_from_a_hotkey() -> None:
    from validator.cli.replay import _table
    from validator.round.replay import ReplayRow

    row = ReplayRow("\x1b[2J\x1b[Hbad", 3, {"status": "ok"}, {"status": "ok"})
    lines = _table([row], 0.0)
    assert "\x1b" not in "".join(lines) and "\\x1b[2J" in lines[1]
