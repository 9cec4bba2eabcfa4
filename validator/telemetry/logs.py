"""Structured logs: JSON lines on stderr for the service, warnings only in the demo's terminal.

An exception is logged with its type, message and frames (`exception` in JSON), never with the
frames' local variables: those hold configuration, peer bytes and secrets."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer


class _CurrentStderr:
    """Whatever `sys.stderr` is when a line is written, not when logging was configured: a stream
    bound at configure time may since have been closed (a test's capture, a redirected CLI run)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(*, quiet: bool = False, json_lines: bool = True, stream: TextIO | None = None) -> None:
    """Structured logs to `stream` (stderr by default)."""
    level = logging.WARNING if quiet else logging.INFO
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s")
    processors: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json_lines:
        exceptions = ExceptionDictTransformer(show_locals=False, use_rich=False)
        processors += [
            structlog.processors.ExceptionRenderer(exceptions),
            structlog.processors.JSONRenderer(),
        ]
    else:
        plain = structlog.dev.plain_traceback  # rich's default would print every frame's locals
        processors.append(structlog.dev.ConsoleRenderer(colors=False, exception_formatter=plain))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream or _CurrentStderr()),  # type: ignore[arg-type]
        # not cached: a later configure (tests, a CLI sub-command) reaches every module's logger
        cache_logger_on_first_use=False,
    )
