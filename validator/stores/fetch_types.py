"""What fetching takes and gives: limits, one request, one result, and the put-window rule."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from scoring.ranking import Status
from validator.stores.commitments import StorageLocation

_HOTKEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """Limits for fetching submissions.

    A stalling store costs one slot for at most `head_timeout_s` (HEADs all go first) or
    `peer_budget_s` (its download), never a retry after a timeout, so `concurrency` stalling peers
    cannot push the others past the window deadline."""

    max_bytes: int = 4 << 30
    put_window_s: float = 70.0
    grace_s: float = 5.0
    request_timeout_s: float = 60.0  # obstore writes (publishing, the archive), not peer reads
    connect_timeout_s: float = 5.0
    head_timeout_s: float = 5.0  # one HEAD, name resolution included
    peer_budget_s: float = 30.0  # one peer's download, whatever happens inside it
    min_bytes_per_s: float = float(1 << 20)  # a slower body is abandoned (after rate_grace_s)
    rate_grace_s: float = 5.0
    retries: int = 2  # extra attempts after a fast transient failure (never after a timeout)
    retry_backoff_s: float = 0.5  # doubled per attempt
    concurrency: int = 32
    chunk_bytes: int = 8 << 20
    allow_private_hosts: bool = False  # tests and local subnets only: peers on 127.0.0.1
    poll_interval_s: float = 0.0  # HEAD polls during the put window to observe uploads; 0: off
    poll_lead_s: float = 30.0  # polls start this long before the put window is expected to open
    # polls a second to one host when peers run their own stores (`stores_trusted` False): a crowd
    # naming one victim's host made every validator a source of traffic against it; 0: no cap
    poll_host_rate: float = 32.0
    window_s: float = 0.0  # seconds from one window's put window to the next's (polls need it)
    # bodies are written here, one file per object key, instead of being held in memory (issue 14)
    spool_dir: Path | None = None
    # the polls' sightings are saved here, one file per window, so that a restart keeps them
    sightings_dir: Path | None = None
    # True: every store's ETag and Last-Modified are set by a provider the operator trusts (its
    # `storage_host_suffixes`) or by a local simulation. False (`allow_any_storage_host`): a peer
    # may run its own store, so a sighting counts for the bytes fetched only when their MD5 is the
    # ETag sighted, and the store's own Last-Modified never decides on its own (validator/stores/
    # peer_fetch.py `bound_timing`)
    stores_trusted: bool = True

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.chunk_bytes < 1 or self.concurrency < 1:
            raise ValueError("max_bytes, chunk_bytes and concurrency must be >= 1")
        if self.put_window_s <= 0 or self.grace_s < 0 or self.retry_backoff_s < 0:
            raise ValueError("put_window_s must be > 0; grace_s and retry_backoff_s >= 0")
        timeouts = (self.request_timeout_s, self.connect_timeout_s, self.head_timeout_s, self.peer_budget_s)
        if min(timeouts) <= 0 or self.retries < 0:
            raise ValueError("timeouts must be > 0 and retries >= 0")
        if self.min_bytes_per_s <= 0 or self.rate_grace_s <= 0:
            raise ValueError("min_bytes_per_s and rate_grace_s must be > 0")
        if self.poll_interval_s < 0 or self.poll_lead_s < 0 or self.poll_host_rate < 0:
            raise ValueError("poll_interval_s, poll_lead_s and poll_host_rate must be >= 0")
        if self.poll_interval_s > 0 and self.window_s <= 0:
            raise ValueError("polling needs window_s > 0 to know when the next put window opens")


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Fetch `key` from a peer's location; `put_start` is T0, the first block time of window W+1."""

    hotkey: str
    location: StorageLocation
    key: str
    put_start: float


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One peer's fetch. `first_seen` is the validator's own observation of the version it read
    (wall clock of the poll that first saw it, or the simulated clock of a local subnet); the put
    time lies in `(first_seen - seen_resolution_s, first_seen]`, and two peers whose first_seen
    differ by less than their resolutions cannot be ordered."""

    hotkey: str
    status: Status  # ok, missing, early or late; invalid only for a file over the size limit
    reason: str | None = None
    detail: str = ""  # generic: shown by the API; the store's own error text goes to logs only
    data: bytes | None = field(default=None, repr=False)
    path: Path | None = None  # the body on disk instead of `data`, when the fetcher spools
    size: int | None = None
    etag: str | None = None
    version: str | None = None  # the object version the store named (x-amz-version-id), if any
    last_modified: float | None = None  # unix seconds, as the store reports it (peer-controlled)
    fetched_at: float = 0.0
    first_seen: float | None = None
    seen_resolution_s: float | None = None  # math.inf when no earlier poll bounds the upload


def object_key(window: int, hotkey: str) -> str:
    """The key of a submission: `gauntlet/1/{window}/{hotkey}.safetensors` (DESIGN.md §4.3)."""
    if window < 0 or not _HOTKEY.fullmatch(hotkey):
        raise ValueError(f"bad window {window} or hotkey {hotkey[:70]!r}")
    return f"gauntlet/1/{window}/{hotkey}.safetensors"


def classify(seen: float, put_start: float, config: FetchConfig, resolution_s: float = 0.0) -> Status:
    """`early` when it was there before T0; `late` when it was surely not there by T0 + put_window_s
    + grace_s (the upload happened in `(seen - resolution_s, seen]`); else `ok`."""
    if seen < put_start:
        return Status.EARLY
    if seen - resolution_s > put_end(put_start, config):  # an unbounded resolution is never late
        return Status.LATE
    return Status.OK


def put_end(put_start: float, config: FetchConfig) -> float:
    return put_start + config.put_window_s + config.grace_s


# Any time the validator records (its own clock, a chain block's, a store's Last-Modified) falls in
# these years (2000-2200); a store may claim any Last-Modified, and one outside them is unknown.
EARLIEST_TIME, LATEST_TIME = 946_684_800.0, 7_258_118_400.0


def plausible_time(ts: float | None) -> float | None:
    """`ts` when a real clock could read it, else None (NaN included)."""
    return ts if ts is not None and EARLIEST_TIME <= ts < LATEST_TIME else None
