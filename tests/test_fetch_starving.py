"""Stalling and trickling stores cannot starve a window's fetch (real servers on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from scoring.data import window_seed
from scoring.ranking import Status
from scoring.types import Reason
from tests.fake_s3 import BlackHole, FakeObject, FakeS3, black_hole, serving
from validator.round.fetching import PutWindow, fetch_window
from validator.round.outcomes import PeerTarget
from validator.stores.commitments import StorageLocation
from validator.stores.fetch_order import StallMemory, fetch_order
from validator.stores.objstore import FetchConfig, Fetcher, FetchRequest, object_key

T0 = time.time() - 10  # the put window opened ten seconds ago
WINDOW = 9
# one slot, a 1 s budget per peer: a crowd of trickling stores holds it for the whole deadline
ONE_SLOT = FetchConfig(
    concurrency=1, head_timeout_s=0.5, peer_budget_s=1.0, retries=0, min_bytes_per_s=100.0,
    rate_grace_s=0.5, allow_private_hosts=True,
)  # fmt: skip
FAST = FetchConfig(
    concurrency=2, head_timeout_s=0.5, peer_budget_s=2.0, retries=2, retry_backoff_s=0.0,
    min_bytes_per_s=2000.0, rate_grace_s=0.5, allow_private_hosts=True,
)  # fmt: skip


def http_location(port: int) -> StorageLocation:
    return StorageLocation(scheme="http", host="127.0.0.1", port=port, bucket="bucket")


def request(hotkey: str, port: int) -> FetchRequest:
    return FetchRequest(hotkey, http_location(port), object_key(WINDOW, hotkey), T0)


@pytest.fixture
def store() -> Iterator[FakeS3]:
    with serving(FakeS3()) as s:
        yield s


def honest(store: FakeS3, hotkey: str, size: int = 1000, trickle: float | None = None) -> FetchRequest:
    data = bytes([len(hotkey)]) * size
    store.put(f"/bucket/{object_key(WINDOW, hotkey)}", FakeObject(data, T0 + 1, trickle_bytes_per_s=trickle))
    return request(hotkey, store.port)


@contextmanager
def holes(count: int) -> Iterator[list[BlackHole]]:
    with ExitStack() as stack:
        yield [stack.enter_context(black_hole()) for _ in range(count)]


def test_as_many_stalling_stores_as_slots_do_not_starve_the_others(store: FakeS3) -> None:
    """Two stores that accept and never answer, first in line, against two slots: every honest peer
    still arrives well inside the deadline, and each staller got exactly one connection."""
    with holes(2) as stalled:
        requests = [request(f"stall{i}", h.port) for i, h in enumerate(stalled)]
        requests += [honest(store, f"honest{i}") for i in range(4)]
        started = time.monotonic()
        results = asyncio.run(Fetcher(FAST).fetch_all(requests, deadline_s=5.0))
        elapsed = time.monotonic() - started
        assert [(r.status, r.reason) for r in results[:2]] == [(Status.MISSING, Reason.FETCH_FAILED)] * 2
        assert all(r.status == Status.OK and r.data for r in results[2:])
        assert elapsed < 2.5  # one short HEAD timeout, not the deadline nor timeout × retries
        assert [h.connections for h in stalled] == [1, 1]  # no retry after a timeout


def test_a_trickling_body_is_abandoned_at_the_floor_rate(store: FakeS3) -> None:
    slow = honest(store, "slow", size=50_000, trickle=200.0)
    fast = honest(store, "fast")
    started = time.monotonic()
    results = asyncio.run(Fetcher(FAST).fetch_all([slow, fast], deadline_s=10.0))
    assert (results[0].status, results[0].reason, results[0].data) == (
        Status.MISSING,
        Reason.FETCH_FAILED,
        None,
    )
    assert results[1].status == Status.OK
    assert time.monotonic() - started < 1.8  # the 0.5 s grace, not the 2 s budget or the deadline
    assert store.requests("GET").count(f"/bucket/{object_key(WINDOW, 'slow')}") == 1


def test_peers_the_deadline_never_reached_are_not_attempted_not_failed() -> None:
    """One slot, four stallers: the first HEAD times out, the second is cut by the deadline (both
    the stores' fault), the last two were never asked: `not_attempted`, which is not penalised."""
    one = FetchConfig(concurrency=1, head_timeout_s=0.6, allow_private_hosts=True)
    with holes(4) as stalled:
        requests = [request(f"p{i}", h.port) for i, h in enumerate(stalled)]
        results = asyncio.run(Fetcher(one).fetch_all(requests, deadline_s=1.0))
        assert [r.reason for r in results] == [Reason.FETCH_FAILED] * 2 + [Reason.NOT_ATTEMPTED] * 2
        assert {r.status for r in results} == {Status.MISSING}
        assert [h.connections for h in stalled] == [1, 1, 0, 0]
        assert "deadline" not in results[0].detail and "did not reach" in results[3].detail


def test_not_attempted_reaches_the_peer_window(store: FakeS3) -> None:
    one = FetchConfig(concurrency=1, head_timeout_s=0.6, allow_private_hosts=True)
    with holes(3) as stalled:
        targets = [PeerTarget(i, f"p{i}", http_location(h.port)) for i, h in enumerate(stalled)]
        peers = fetch_window(Fetcher(one), targets, PutWindow(WINDOW, T0), deadline_s=1.0)
        assert [(p.status, p.reason) for p in peers][-1] == ("missing", Reason.NOT_ATTEMPTED)


def test_fetch_order_is_a_secret_seeded_permutation() -> None:
    seed = window_seed(b"validator-secret", 12)  # the round's per-window seed, a hex string
    order = fetch_order(50, seed)
    assert sorted(order) == list(range(50)) and order != list(range(50))
    assert fetch_order(50, seed) == order  # replayable
    assert fetch_order(50, window_seed(b"validator-secret", 13)) != order
    assert fetch_order(50, 12345) == fetch_order(50, 12345) != fetch_order(50, 12346)
    assert fetch_order(5, None) == [0, 1, 2, 3, 4]


def test_heads_go_out_in_the_seeded_order(store: FakeS3) -> None:
    seed = window_seed(b"validator-secret", 3)
    requests = [honest(store, f"peer{i:02d}") for i in range(12)]
    config = FetchConfig(concurrency=1, allow_private_hosts=True)
    asyncio.run(Fetcher(config).fetch_all(requests, deadline_s=10.0, seed=seed))
    heads = store.requests("HEAD")
    assert heads == [f"/bucket/{requests[i].key}" for i in fetch_order(12, seed)]
    # every HEAD is queued before any GET: with one slot, the first GET follows the last HEAD
    kinds = [m for m, _, _ in store.log]
    assert kinds[:12] == ["HEAD"] * 12


def test_absent_objects_give_their_connection_back(store: FakeS3) -> None:
    """404s on one store, more than the pool holds, then present objects: nobody waits on the pool."""
    config = FetchConfig(concurrency=2, head_timeout_s=1.0, allow_private_hosts=True)
    requests = [request(f"absent{i}", store.port) for i in range(6)] + [
        honest(store, f"here{i}") for i in range(2)
    ]
    started = time.monotonic()
    results = asyncio.run(Fetcher(config).fetch_all(requests, deadline_s=5.0))
    assert [r.reason for r in results[:6]] == [Reason.MISSING] * 6
    assert [r.status for r in results[6:]] == [Status.OK] * 2
    assert time.monotonic() - started < 1.0


def test_a_get_the_deadline_cut_short_is_not_held_against_its_peer(store: FakeS3) -> None:
    """One slot: a staller trickles just above the floor rate and holds it for its whole budget (its
    own fault: `fetch_failed`). A peer after it gets only what is left before the deadline, less
    than its store needs: at its pace it would have finished within its own budget, so running out
    is the validator's shortfall, `not_attempted` (not penalised; it used to end `fetch_failed`, so
    stallers got honest peers penalised). A second staller squeezed the same way earns no excuse:
    at its pace it would not have finished within its budget either."""
    config = FetchConfig(
        concurrency=1, head_timeout_s=2.0, peer_budget_s=4.0, retries=0, min_bytes_per_s=100.0,
        rate_grace_s=0.5, allow_private_hosts=True,
    )  # fmt: skip
    staller = honest(store, "staller", size=10_000, trickle=400.0)  # 25 s of body
    # 1.5 s at the store's nominal rate (a loaded machine's sleeps make it slower): inside its own
    # 4 s budget, not inside the ~0.75 s the deadline leaves it
    late = honest(store, "late", size=3_000, trickle=2_000.0)
    results = asyncio.run(Fetcher(config).fetch_all([staller, late], deadline_s=5.0))
    assert (results[0].status, results[0].reason) == (Status.MISSING, Reason.FETCH_FAILED)
    assert (results[1].status, results[1].reason) == (Status.MISSING, Reason.NOT_ATTEMPTED), results[1]
    assert "deadline cut" in results[1].detail
    second = honest(store, "second", size=10_000, trickle=400.0)
    results = asyncio.run(Fetcher(config).fetch_all([staller, second], deadline_s=5.0))
    assert [r.reason for r in results] == [Reason.FETCH_FAILED, Reason.FETCH_FAILED], results


def test_the_object_version_a_store_names_is_recorded(store: FakeS3) -> None:
    """A versioned bucket names the version read: it reaches the submission record (and the API's
    `version_id`, which was always null)."""
    from validator.round.outcomes import PeerTarget as Target
    from validator.round.outcomes import PeerWindow
    from validator.round.recording import submission_record

    versioned = honest(store, "versioned")
    store.objects[f"/bucket/{versioned.key}"].version = "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"
    plain = honest(store, "plain")
    results = asyncio.run(Fetcher(FAST).fetch_all([versioned, plain], deadline_s=5.0))
    assert [r.version for r in results] == ["3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", None]
    peer = PeerWindow(Target(1, "versioned", None), Status.OK, None, "", results[0])
    assert submission_record(peer, "k").version_id == "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"


def test_peers_aggregated_lately_are_fetched_ahead_of_a_crowd_of_slow_stores(store: FakeS3) -> None:
    """A crowd of stores trickling just above the rate floor held every slot for its whole budget,
    and a proven peer drawn after it was never fetched (64 such stores beside 8 peers: 2 to 8 of
    them fetched). Lately aggregated peers go first, in the window's secret order among them."""
    config = ONE_SLOT
    crowd = [honest(store, f"slow{i}", size=20_000, trickle=400.0) for i in range(4)]
    proven = honest(store, "proven")
    requests = [*crowd, proven]
    assert fetch_order(5, 0)[-1] == 4  # drawn last
    late = asyncio.run(Fetcher(config).fetch_all(requests, deadline_s=2.5, seed=0))
    # behind the crowd, as before: never reached, or reached only as the deadline cuts it (which of
    # the two depends on when each trickling store gives up: a clean clone's run read fetch_failed)
    assert late[-1].status != Status.OK and late[-1].reason in (Reason.NOT_ATTEMPTED, Reason.FETCH_FAILED)
    ahead = asyncio.run(Fetcher(config).fetch_all(requests, deadline_s=2.5, seed=0, first={"proven"}))
    assert ahead[-1].status == Status.OK
    assert fetch_order(6, 7, first=[4, 1]) == [i for i in fetch_order(6, 7) if i in (1, 4)] + [
        i for i in fetch_order(6, 7) if i not in (1, 4)
    ]


def test_a_newcomer_is_fetched_ahead_of_stores_that_failed_before(store: FakeS3) -> None:
    """A new peer is not aggregated yet, so it is not fetched first: it drew its place among a
    crowd of trickling stores every window, as if none had ever failed. Stores that failed go last
    from the next window on, until a fetch of theirs ends otherwise."""
    config = ONE_SLOT
    crowd = [honest(store, f"slow{i}", size=20_000, trickle=400.0) for i in range(2)]
    newcomer = honest(store, "newcomer")
    requests = [*crowd, newcomer]
    drawn_last = next(s for s in range(1000) if fetch_order(3, s)[-1] == 2)
    fetcher = Fetcher(config)
    # the crowd holds the one slot for the whole deadline: its first store for its 1 s budget, the
    # second until the deadline cuts it
    first = asyncio.run(fetcher.fetch_all(requests, deadline_s=1.8, seed=drawn_last))
    assert first[-1].reason == Reason.NOT_ATTEMPTED
    failed = [r.hotkey for r in first if r.reason == Reason.FETCH_FAILED]
    assert failed and set(failed) == fetcher.stalled
    # the same draw: a store that failed goes last; at most one of the crowd is ahead (1 s)
    second = asyncio.run(fetcher.fetch_all(requests, deadline_s=1.8, seed=drawn_last))
    assert second[-1].status == Status.OK, second[-1]
    honest(store, failed[0])  # that store now serves at once: fetched once the others are served
    third = asyncio.run(fetcher.fetch_all(requests, deadline_s=6.0, seed=drawn_last))
    assert {r.hotkey: r.status for r in third}[failed[0]] == Status.OK
    assert fetcher.stalled == set(failed)  # one failure holds its peer behind for a while


def test_a_store_that_fails_every_other_window_stays_behind_a_newcomer(store: FakeS3) -> None:
    """Remembering only the last attempt let a store that fails every other window back among the
    newcomers every other window, where it held the slot ahead of them for its whole budget. Its
    failures are remembered over its last attempts, and it stays behind (the slot is one: the HEADs
    go out in fetch order)."""
    flaky, newcomer = honest(store, "flaky"), honest(store, "newcomer")
    drawn_first = next(s for s in range(1000) if fetch_order(2, s) == [0, 1])
    fetcher = Fetcher(ONE_SLOT)
    for turn in range(4):
        failing = turn % 2 == 0  # it trickles in windows 0 and 2 and serves at once in 1 and 3
        trickle = 400.0 if failing else None
        store.put(f"/bucket/{flaky.key}", FakeObject(b"x" * 20_000, T0 + 1, trickle_bytes_per_s=trickle))
        store.log.clear()
        out = asyncio.run(fetcher.fetch_all([flaky, newcomer], deadline_s=4.0, seed=drawn_first))
        assert [r.reason for r in out] == [Reason.FETCH_FAILED if failing else None, None]
        heads = store.requests("HEAD")
        expected = [flaky.key, newcomer.key] if turn == 0 else [newcomer.key, flaky.key]
        assert heads == [f"/bucket/{k}" for k in expected], turn
    assert fetcher.stalled == {"flaky"}


def test_stall_memory_and_the_order_it_gives() -> None:
    memory = StallMemory(span=3)
    memory.note([("a", Reason.FETCH_FAILED), ("b", Reason.FETCH_FAILED), ("c", None)])
    assert memory.stalled == {"a", "b"}
    memory.note([("a", Reason.NOT_ATTEMPTED), ("b", Reason.MISSING), ("c", Reason.FETCH_FAILED)])
    # not attempted: no news; missing (a quick 404): not a stall, though b's failure is remembered
    assert memory.failures == {"a": 1, "b": 1, "c": 1}
    memory.note([("b", Reason.FETCH_FAILED), ("c", None)])
    assert memory.failures == {"b": 2, "c": 1}  # "a" left the subnet: forgotten
    memory.note([("b", None), ("c", None)])
    memory.note([("b", None), ("c", None)])
    assert memory.failures == {"b": 1}  # c's failure is three attempts old; b's second is not
    assert fetch_order(6, 7, last={4: 1, 1: 1}) == [i for i in fetch_order(6, 7) if i not in (1, 4)] + [
        i for i in fetch_order(6, 7) if i in (1, 4)
    ]
    assert fetch_order(6, 7, first=[1], last={1: 1, 2: 1})[0] == 1  # first wins over last
    drawn = fetch_order(6, 7)
    a, b = [i for i in drawn if i in (1, 4)]  # 1 and 4 in their drawn order
    # the store failing more often goes last, whatever the draw
    assert fetch_order(6, 7, last={a: 3, b: 1})[-2:] == [b, a]
    assert fetch_order(6, 7, last={a: 1, b: 1})[-2:] == [a, b]
    assert fetch_order(6, 7, last={a: 0}) == drawn  # a count of 0 is no failure
    with pytest.raises(ValueError):
        StallMemory(span=0)
