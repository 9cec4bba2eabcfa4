"""Who the peers are and where they publish, then every submission fetched concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from scoring.ranking import Status
from scoring.types import Reason
from storage.fields import storable_hotkey
from validator.chain.protocol import Chain
from validator.round.outcomes import PeerTarget, PeerWindow
from validator.stores.commitments import LocationError, LocationPolicy, parse_location
from validator.stores.objstore import Fetcher, FetchRequest, FetchResult, object_key
from validator.stores.peer_fetch import clear_spool

log = structlog.get_logger(__name__)


def read_targets(chain: Chain, policy: LocationPolicy, *, exclude: str | None = None) -> list[PeerTarget]:
    """Every registered neuron (but the validator itself) with its parsed storage location. Left out
    and logged, since recorded they would fail the commit of every window, in every retry: a hotkey
    no row could name (storage/fields.py `storable_hotkey`; never an SS58 address), and a second
    neuron with a uid or hotkey already listed (an inconsistent metagraph answer; the first stays)."""
    commitments = chain.commitments()
    targets: list[PeerTarget] = []
    uids: set[int] = set()
    hotkeys: set[str] = set()
    for n in chain.neurons():
        if n.hotkey == exclude:
            continue
        why = (
            "not storable" if not storable_hotkey(n.hotkey)
            else "duplicate uid" if n.uid in uids
            else "duplicate hotkey" if n.hotkey in hotkeys
            else None
        )  # fmt: skip
        if why is not None:
            log.warning("hotkey_left_out", uid=n.uid, hotkey=ascii(n.hotkey[:70]), why=why)
            continue
        uids.add(n.uid)
        hotkeys.add(n.hotkey)
        targets.append(_target(n.uid, n.hotkey, commitments.get(n.hotkey), policy))
    return targets


def _target(uid: int, hotkey: str, text: str | None, policy: LocationPolicy) -> PeerTarget:
    if text is None:
        return PeerTarget(uid, hotkey, None, "no storage location committed", Reason.NO_LOCATION)
    try:
        object_key(0, hotkey)  # a hotkey that cannot name an object key has nothing we could fetch
        return PeerTarget(uid, hotkey, parse_location(text, policy))
    except LocationError as e:
        return PeerTarget(
            uid, hotkey, None, f"unusable commitment ({e.reason}): {e.detail}", Reason.BAD_LOCATION
        )
    except ValueError as e:
        return PeerTarget(uid, hotkey, None, f"unusable hotkey: {e}", Reason.BAD_LOCATION)


@dataclass(frozen=True, slots=True)
class PutWindow:
    """A window whose objects are fetched, and when its put window opened (wall clock)."""

    window: int
    put_start: float
    first: frozenset[str] = frozenset()  # fetched ahead of the others: peers aggregated lately


def fetch_window(
    fetcher: Fetcher,
    targets: Sequence[PeerTarget],
    put: PutWindow,
    deadline_s: float,
    on_result: Callable[[FetchResult], None] | None = None,
    *,
    seed: int | str | None = None,
) -> list[PeerWindow]:
    """One PeerWindow per target, in target order: ok with bytes (or their spooled file), or
    missing/early/late with a reason.

    `seed` (the window's secret seed) shuffles the fetch order. Upload times come from the polls
    started at the previous window's fetch; this one starts those of window + 1, whose put window
    opens about `window_s` after this one's (when the fetcher polls at all)."""
    window, put_start = put.window, put.put_start
    requests = fetch_requests(targets, window, put_start)
    fetcher.retain({r.location for r in requests})
    if fetcher.config.spool_dir is not None:  # the last window's aggregate is applied: its files are unused
        clear_spool(fetcher.config.spool_dir, window)
    sightings = fetcher.observed(window)
    fetched = (
        asyncio.run(
            fetcher.fetch_all(
                requests, deadline_s, on_result, seed=seed, sightings=sightings, first=put.first
            )
        )
        if requests
        else []
    )
    next_start = put_start + fetcher.config.window_s
    fetcher.watch(window + 1, fetch_requests(targets, window + 1, next_start), next_start)
    results = {r.hotkey: r for r in fetched}
    return [_peer_window(t, results.get(t.hotkey)) for t in targets]


def fetch_requests(targets: Sequence[PeerTarget], window: int, put_start: float) -> list[FetchRequest]:
    return [
        FetchRequest(t.hotkey, t.location, object_key(window, t.hotkey), put_start)
        for t in targets
        if t.location is not None
    ]


def _peer_window(target: PeerTarget, result: FetchResult | None) -> PeerWindow:
    if result is None:
        return PeerWindow(target, Status.MISSING, target.reason or Reason.MISSING, target.problem)
    if result.status == Status.OK:
        return PeerWindow(target, Status.OK, None, "", result)
    return PeerWindow(target, result.status, result.reason or result.status, result.detail, result)
