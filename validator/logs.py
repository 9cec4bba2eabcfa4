"""Structured logs: JSON lines on stderr for the service, warnings only in the demo's terminal."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, quiet: bool = False, json_lines: bool = True) -> None:
    level = logging.WARNING if quiet else logging.INFO
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
