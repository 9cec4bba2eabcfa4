"""The polls' sightings on disk, one file per window, so that a restarted process keeps them.

Without them a window fetched after a restart (the process was killed between the polls and the
window's commit) could judge timing only by the store's `Last-Modified`, which the peer controls.
The poller rewrites its window's file after every round of HEADs (atomically: temp file, then
rename), a restarted poller continues from it, and a fetch with no poller of its own reads it.
The files are the validator's own, but a crash can leave anything: one that is unreadable is
logged and ignored, as if there had been no polls.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import structlog

from validator.stores.sightings import Sighting, Sightings

log = structlog.get_logger(__name__)

FORMAT = "gauntlet-sightings/1"
MAX_BYTES = 64 << 20  # far above a window of thousands of peers (about 150 bytes per sighting)
_NAME = re.compile(r"(\d{1,18})\.json")


class SightingsFolder:
    """`{root}/{window}.json` per window watched."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, window: int) -> Path:
        return self.root / f"{window}.json"

    def save(self, window: int, sightings: Sightings) -> None:
        first, answered = sightings.snapshot()
        body = {
            "format": FORMAT,
            "window": window,
            # an unbounded resolution is null: JSON has no infinity
            "first": [
                [hotkey, etag, s.first_seen, None if math.isinf(s.resolution_s) else s.resolution_s]
                for (hotkey, etag), s in first.items()
            ],
            "answered": answered,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(body, f, allow_nan=False)
            os.replace(tmp, self._path(window))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self, window: int) -> Sightings | None:
        """What the polls of `window` saw, or None when nothing (usable) was saved."""
        path = self._path(window)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("sightings_unreadable", window=window, error=repr(e)[:200])
            return None
        try:
            if len(raw) > MAX_BYTES:
                raise ValueError(f"over {MAX_BYTES} bytes")
            return _parse(json.loads(raw), window)
        except (ValueError, TypeError, KeyError) as e:  # a torn or foreign file: as if never polled
            log.warning("sightings_unreadable", window=window, error=repr(e)[:200])
            return None

    def prune(self, before: int) -> None:
        """Delete the files of windows before `before` (they are fetched and committed)."""
        if not self.root.is_dir():
            return
        for path in self.root.iterdir():
            match = _NAME.fullmatch(path.name)
            if match is not None and int(match.group(1)) < before:
                path.unlink(missing_ok=True)


def _parse(body: Any, window: int) -> Sightings:
    if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("window") != window:
        raise ValueError("not this window's sightings file")
    rows, polls = body["first"], body["answered"]
    if not isinstance(rows, list) or not isinstance(polls, dict):
        raise TypeError("first must be a list and answered an object")
    first: dict[tuple[str, str], Sighting] = {}
    for row in rows:
        if not isinstance(row, list) or len(row) != 4:
            raise TypeError("a sighting is [hotkey, etag, first_seen, resolution]")
        hotkey, etag, seen, resolution = row
        width = math.inf if resolution is None else _time(resolution)
        first[(_text(hotkey), _text(etag))] = Sighting(_time(seen), width)
    answered = {_text(hotkey): _time(sent) for hotkey, sent in polls.items()}
    return Sightings.restore(first, answered)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"expected a finite number, got {value!r:.40}")
    return float(value)
