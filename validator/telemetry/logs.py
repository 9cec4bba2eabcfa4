"""Structured logs: JSON lines on stderr for the service, warnings only in the demo's terminal.

An exception is logged with its type, message and frames (`exception` in JSON), never with the
frames' local variables: those hold configuration, peer bytes and secrets.

Records of the standard library's `logging` that reach the root logger (the API's own warnings,
httpx, Alembic; not uvicorn's, which it prints itself) go through the same renderer, so they are
JSON lines too: raw, they would carry what a peer's server sent (httpx logs each response's reason
phrase, and h11 lets an ESC through) straight to an operator's terminal as escape sequences. Only
their warnings and errors are shown: below that they are libraries' chatter (Alembic's steps,
httpx's line per peer request, whose outcome the fetch records itself)."""

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
    shared: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    rendering: list[structlog.typing.Processor]
    if json_lines:
        exceptions = ExceptionDictTransformer(show_locals=False, use_rich=False)
        rendering = [structlog.processors.ExceptionRenderer(exceptions), structlog.processors.JSONRenderer()]
    else:
        plain = structlog.dev.plain_traceback  # rich's default would print every frame's locals
        rendering = [structlog.dev.ConsoleRenderer(colors=False, exception_formatter=plain)]
    _route_stdlib(level, shared, rendering, stream)
    processors = shared + rendering
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream or _CurrentStderr()),  # type: ignore[arg-type]
        # not cached: a later configure (tests, a CLI sub-command) reaches every module's logger
        cache_logger_on_first_use=False,
    )


class _Ours(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler configure_logging installs on the root logger (replaced, never stacked)."""


def _route_stdlib(
    level: int,
    shared: list[structlog.typing.Processor],
    rendering: list[structlog.typing.Processor],
    stream: TextIO | None,
) -> None:
    """The standard library's records through structlog's renderer (module docstring)."""
    handler = _Ours(stream or _CurrentStderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
        )
    )
    root = _without_ours()
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))


def reset_logging() -> None:
    """structlog's defaults again, and the root logger without configure_logging's handler."""
    structlog.reset_defaults()
    _without_ours()


def _without_ours() -> logging.Logger:
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Ours)]:
        root.removeHandler(old)
    return root
