"""Recovery paths of the validator process: restore, conflicting commits, the serve loop, hostile
commitments and degenerate norms."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
import torch
from bittensor.result import ChainError

from scoring.model import ModelConfig, build_model
from scoring.types import Reason, SparseParam, SparseUpdate, SubmissionMeta
from scoring.wire import CodecConfig
from tests.e2e_fixtures import clear_gauntlet_env
from tests.storage_fixtures import make_window
from validator.chain.local import LocalChain, LocalChainConfig
from validator.chain.protocol import Neuron
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers
from validator.round.check_config import CheckConfig
from validator.round.fetching import read_targets
from validator.round.loop import Round, WindowState
from validator.round.norms import reject_norm_outliers
from validator.round.outcomes import PeerTarget, PeerWindow
from validator.service import Retry, _reconnect, serve
from validator.settings import Settings
from validator.state.ledger import CommittedElsewhere
from validator.stores.commitments import LocationPolicy
from validator.wiring import open_ledger

SMALL = ModelConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=48, max_seq_len=32)


def _ledger(tmp_path: Path):  # type: ignore[no-untyped-def]
    return open_ledger(Settings(database_url=f"sqlite:///{tmp_path}/g.db", workdir=tmp_path, redis_url=None))


def test_a_process_that_never_committed_restarts_in_a_later_window(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    first, _ = ledger.restore(build_model(SMALL, seed=1), start_window=5, outer_lr=1.0, codec=CodecConfig())
    again, ratings = ledger.restore(
        build_model(SMALL, seed=2), start_window=7, outer_lr=1.0, codec=CodecConfig()
    )
    assert (first.window, again.window) == (5, 7) and ratings.peers == {}
    assert again.base == first.base  # the initial model from the checkpoint, not the new random init
    for (_, a), (_, b) in zip(first.model.named_parameters(), again.model.named_parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_window_committed_differently_elsewhere_is_refused(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    record = make_window(3)
    ledger.commit(record)
    ledger.commit(record)  # the same record again (a lost acknowledgement): fine
    with pytest.raises(CommittedElsewhere):
        ledger.commit(dataclasses.replace(record, aggregate_digests=["f" * 64]))
    # the same aggregate, rated otherwise: a second process that saw one peer differently carried its
    # own ratings on, never stored, and derived the next windows' ratings from them
    other = dataclasses.replace(record.ratings[0], mu=record.ratings[0].mu + 1.0)
    with pytest.raises(CommittedElsewhere, match="ratings"):
        ledger.commit(dataclasses.replace(record, ratings=[other, *record.ratings[1:]]))


def _crashing_once(tmp_path: Path, stage: str) -> tuple[DemoRunner, list[int]]:
    """Two honest peers' window 1, published, and a round that raises once after `stage`."""
    clear_gauntlet_env()
    crashed: list[int] = []

    def hook(done: str, window: int) -> None:
        if done == stage and not crashed:
            crashed.append(window)
            raise RuntimeError("injected")

    cfg = DemoConfig(parse_peers("honest:2"), workdir=tmp_path / "d", inner_steps=2, corpus_tokens=100_000)
    runner = DemoRunner(cfg, hook=hook)
    runner.publish(1)
    return runner, crashed


def test_serve_rebuilds_after_a_failed_round_and_commits_the_window(tmp_path: Path) -> None:
    runner, crashed = _crashing_once(tmp_path, "evaluate")
    stop = threading.Event()
    done = serve(
        runner.round, runner.state, stop=stop, reconnect=lambda rnd, state: runner.connect(), max_windows=1,
        retry=Retry(pause_s=0.0),
    )  # fmt: skip
    assert done == 1 and crashed == [1]
    assert runner.round.ledger.window_state(1) == "committed"


class _FlakyWait:
    """A chain whose first `blips` waits fail as a dropped websocket does."""

    def __init__(self, inner: LocalChain, blips: int) -> None:
        self.inner, self.blips = inner, blips

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def wait_for_block(self, block: int, timeout: float) -> int:
        if self.blips > 0:
            self.blips -= 1
            raise ChainError("connection lost while waiting for a subscription response")
        return self.inner.wait_for_block(block, timeout)


def test_chain_errors_while_waiting_are_not_failed_attempts_at_the_window(tmp_path: Path) -> None:
    """Counted as failed rounds, three dropped connections while waiting rebuilt the round three
    times and ran the window salvaged: one transient stage error then gave up the stage's work."""
    runner, crashed = _crashing_once(tmp_path, "rate")
    rnd = dataclasses.replace(runner.round, chain=_FlakyWait(runner.round.chain, blips=3))
    rebuilt: list[int] = []

    def reconnect(old: Round, state: WindowState) -> tuple[Round, WindowState]:
        rebuilt.append(old.chain.block())
        return runner.connect()

    done = serve(rnd, runner.state, stop=threading.Event(), reconnect=reconnect, max_windows=1,
                 retry=Retry(pause_s=0.0))  # fmt: skip
    assert done == 1 and crashed == [1] and len(rebuilt) == 1  # the stage's error alone was a failure
    assert rnd.metrics.chain_errors._value.get() == 3
    record = open_ledger(runner.settings).window_detail(1)
    assert record is not None and not record.salvaged and record.ratings


def test_a_reconnected_round_keeps_the_fetcher_and_its_polls(tmp_path: Path) -> None:
    """Rebuilt from storage after a failure, the round goes on with the old fetcher: its polls hold
    the validator's own sightings of the uploads, which a new fetcher would not have."""
    clear_gauntlet_env()
    cfg = DemoConfig(parse_peers("honest:1"), workdir=tmp_path / "d", inner_steps=2, corpus_tokens=100_000)
    runner = DemoRunner(cfg)
    old = runner.round
    new, _ = _reconnect(old, runner.state, lambda rnd, state: runner.connect(), threading.Event(), 0.0)
    assert new.fetcher is old.fetcher and new.ledger is not old.ledger
    new.ledger.engine.dispose()


def test_hostile_commitments_end_with_location_reasons(tmp_path: Path) -> None:
    chain = LocalChain(LocalChainConfig(tmp_path / "chain.sqlite"))
    unstorable = ["x" * 65, "nul\x00key", "caf\u00e9"]  # no row could name them: left out
    for uid, hotkey in enumerate(["5Fgood", "5Fnone", "5Fgarbage", "5Fprivate", "bad/hotkey", *unstorable]):
        chain.register(hotkey, uid=uid)
    chain.commit("5Fgood", f"file://{tmp_path}/store")
    chain.commit("5Fgarbage", "not a url at all")
    chain.commit("5Fprivate", "http://127.0.0.1:9000/bucket")
    chain.commit("bad/hotkey", f"file://{tmp_path}/store")
    strict = LocationPolicy(allow_http=False, allow_private_hosts=False, allow_file=True)
    reasons = {t.hotkey: t.reason for t in read_targets(chain, strict)}
    assert reasons == {
        "5Fgood": None, "5Fnone": Reason.NO_LOCATION, "5Fgarbage": Reason.BAD_LOCATION,
        "5Fprivate": Reason.BAD_LOCATION, "bad/hotkey": Reason.BAD_LOCATION,
    }  # fmt: skip


def test_duplicate_neurons_in_a_metagraph_answer_are_left_out() -> None:
    """Two rows for one hotkey (or one uid) would fail the window's commit in every retry."""

    class Doubled:
        def neurons(self) -> list[Neuron]:
            return [Neuron(1, "5Fa", 0.0, False), Neuron(2, "5Fb", 0.0, False), Neuron(3, "5Fa", 0.0, False),
                    Neuron(2, "5Fc", 0.0, False), Neuron(4, "5Fd", 0.0, False)]  # fmt: skip

        def commitments(self) -> dict[str, str]:
            return {}

    targets = read_targets(Doubled(), LocationPolicy())  # type: ignore[arg-type]  # only what it reads
    assert [(t.uid, t.hotkey) for t in targets] == [(1, "5Fa"), (2, "5Fb"), (4, "5Fd")]


def test_a_window_with_unusable_chain_hotkeys_commits(tmp_path: Path) -> None:
    """A hotkey that names no object key is a `bad_location` peer and one no row could name is left
    out; before, building the record's object key raised in the commit stage, every retry."""
    clear_gauntlet_env()
    cfg = DemoConfig(parse_peers("honest:1"), workdir=tmp_path / "d", inner_steps=2, corpus_tokens=100_000)
    runner = DemoRunner(cfg)
    for hotkey in ("bad/hotkey", "x" * 65):
        runner.chain.register(hotkey)
        runner.chain.commit(hotkey, f"file://{tmp_path}/store")
    window = runner.next_window
    runner.publish(window)
    report = runner.validate(window)
    assert runner.round.ledger.window_state(window) == "committed"
    record = runner.round.ledger.window_detail(window)
    assert record is not None
    bad = {
        s.hotkey: s for s in record.submissions if s.hotkey not in {p.hotkey for p in report.peers if p.valid}
    }
    assert {h: (s.reason, s.object_key) for h, s in bad.items()} == {
        "bad/hotkey": (Reason.BAD_LOCATION, None)
    }


def test_only_trusted_storage_providers_when_configured() -> None:
    from validator.stores.commitments import LocationError, parse_location

    policy = LocationPolicy(allowed_host_suffixes=(".r2.cloudflarestorage.com",))
    assert parse_location("https://acct.r2.cloudflarestorage.com/bucket", policy).host.endswith(
        "r2.cloudflarestorage.com"
    )
    with pytest.raises(LocationError) as e:
        parse_location("https://selfhosted.example.org/bucket", policy)
    assert e.value.reason == "host_not_allowed"


def _peer(hotkey: str, scale: float) -> PeerWindow:
    p = SparseParam((8,), torch.arange(4), torch.full((4,), scale))
    update = SparseUpdate(SubmissionMeta(1, 0, hotkey, "b", "s"), hotkey * 8, {"w": p})
    return PeerWindow(PeerTarget(0, hotkey, None), "ok", update=update)


def test_zero_updates_cannot_make_honest_peers_norm_outliers() -> None:
    peers = (
        [_peer(f"z{i}", 0.0) for i in range(5)] + [_peer(f"h{i}", 1.0) for i in range(3)] + [_peer("x", 1e3)]
    )
    out = {p.hotkey: p.reason for p in reject_norm_outliers(peers, CheckConfig())}
    assert [h for h, reason in out.items() if reason == Reason.NORM_OUTLIER] == ["x"]


def test_tiny_sybils_cannot_make_honest_peers_norm_outliers() -> None:
    """Four sybils at 1e-6 against three honest peers owned the median of every valid norm, and every
    honest update was rejected `norm_outlier` (the audit's reproduction). The reference is the larger
    of the upper quartile and the proven peers' median: neither crowd nor proven few can lower it."""
    sybils = [_peer(f"s{i}", 1e-6) for i in range(4)]
    peers = [_peer(f"h{i}", 1.0) for i in range(3)] + sybils + [_peer("x", 1e3)]
    for proven in (frozenset({"h0", "h1"}), frozenset()):
        out = {p.hotkey: p.reason for p in reject_norm_outliers(peers, CheckConfig(), proven)}
        assert [h for h, reason in out.items() if reason == Reason.NORM_OUTLIER] == ["x"], proven
    # a proven peer that sends a tiny update does not become the reference on its own
    out = {p.hotkey: p.reason for p in reject_norm_outliers(peers, CheckConfig(), frozenset({"s0"}))}
    assert [h for h, reason in out.items() if reason == Reason.NORM_OUTLIER] == ["x"]
    # three sybils to one: the upper quartile is theirs too, so only proven peers protect a new network
    crowd = [_peer("h0", 1.0), *(_peer(f"s{i}", 1e-6) for i in range(4))]
    assert reject_norm_outliers(crowd, CheckConfig(), frozenset({"h0"}))[0].reason is None
    # one proven peer (or a proven minority) sending a small update does not become the reference
    honest = [_peer(f"h{i}", 1.0) for i in range(6)]
    for proven in ({"a"}, {"a", "b", "h0"}):
        small = [_peer("a", 0.005), _peer("b", 0.005), *honest]
        assert not [p for p in reject_norm_outliers(small, CheckConfig(), frozenset(proven)) if p.reason]
    # three peers: the quartile is never the largest, so one update ×10⁶ is still an outlier
    three = reject_norm_outliers([_peer("h0", 1.0), _peer("h1", 1.0), _peer("x", 1e6)], CheckConfig())
    assert [p.hotkey for p in three if p.reason == Reason.NORM_OUTLIER] == ["x"]


def test_config_show_masks_the_selection_bucket_credentials() -> None:
    s = Settings(selection_location="https://AKID:topsecret@r2.example.com/sel?region=auto", redis_url=None)
    assert "topsecret" not in str(s.masked())


def test_a_peer_whose_records_cannot_be_built_is_internal_error_not_a_failed_commit() -> None:
    from scoring.loss_score import PeerEval
    from validator.round.recording import recordable, submission_record
    from validator.stores.objstore import FetchResult

    far = PeerWindow(
        PeerTarget(1, "far", None), "ok", fetch=FetchResult("far", "ok", size=9, last_modified=1e300)
    )
    assert submission_record(far, "k").storage_time is None  # a Last-Modified no datetime can hold
    odd = PeerEval(2, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1, timings="not timings")  # type: ignore[arg-type]
    broken = PeerWindow(
        PeerTarget(2, "odd", None), "ok", fetch=FetchResult("odd", "ok", size=9), evaluation=odd
    )
    out = recordable([far, broken], window=3)
    assert out[0] == far
    assert (out[1].status, out[1].reason, out[1].evaluation, out[1].fetch) == (
        "invalid", Reason.INTERNAL_ERROR, None, None,
    )  # fmt: skip
