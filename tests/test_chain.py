"""SubtensorChain through the bittensor SDK's own code paths, against an in-memory Substrate."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path

import bittensor as bt
import pytest
from bittensor.keyfiles import Keypair

from tests.fake_substrate import GENESIS_MS, FakeSubstrate
from validator.chain import subtensor
from validator.chain.protocol import (
    Chain,
    Neuron,
    WeightLimits,
    WeightOutcome,
    WindowConfig,
    first_block,
    window_of,
)
from validator.chain.subtensor import SubtensorChain, SubtensorChainConfig
from validator.chain.weight_rules import accepted
from validator.round.weight_limits import conformed

NETUID = 3
PEER = "5FHneW46xGXgs5mUiveU4sbTyGBzmstUspZC92UhjJM694ty"
OTHER = "5FLSigC9HGRKVhB9FiEo4Y3koPsNmBmLJbpXg2mp1hXcS59Y"


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK caches token symbols under ~/.bittensor on connect; keep that in the test's folder.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BTCLI_TOKEN_SYMBOLS_CACHE", str(tmp_path / "symbols.json"))


@pytest.fixture
def config(tmp_path: Path) -> SubtensorChainConfig:
    wallet = bt.Wallet("validator", "hot", path=str(tmp_path / "wallets"))
    wallet.regenerate_hotkey(seed="0x" + "11" * 32, use_password=False, overwrite=True, suppress=True)
    return SubtensorChainConfig(
        network="local", netuid=NETUID, wallet_name="validator", hotkey_name="hot",
        wallet_path=str(tmp_path / "wallets"),
    )  # fmt: skip


@pytest.fixture
def fake() -> FakeSubstrate:
    return FakeSubstrate(netuid=NETUID, head=100)


@pytest.fixture
def chain(config: SubtensorChainConfig, fake: FakeSubstrate) -> Iterator[SubtensorChain]:
    client = bt.Subtensor("local", substrate=fake)
    chain = SubtensorChain(config, client=client)
    fake.register(chain.hotkey, "5Cold", stake_rao=2_500_000_000_000, permit=True)
    fake.register(PEER, "5Cold", stake_rao=1_000_000_000)
    fake.register(OTHER, "5Cold")
    yield chain
    chain.close()


def test_reads_block_time_and_metagraph(chain: SubtensorChain, fake: FakeSubstrate) -> None:
    protocol: Chain = chain  # checked by mypy: SubtensorChain implements the Chain protocol
    assert protocol.block() == 100
    assert chain.block_timestamp(5) == GENESIS_MS / 1000 + 60.0
    assert chain.neurons() == [
        Neuron(0, chain.hotkey, 2500.0, True),
        Neuron(1, PEER, 1.0, False),
        Neuron(2, OTHER, 0.0, False),
    ]


def test_wait_for_block_returns_the_head_that_reached_it(chain: SubtensorChain) -> None:
    assert chain.wait_for_block(103, timeout=5.0) == 103
    assert chain.block() == 103
    with pytest.raises(ValueError):
        chain.wait_for_block(104, timeout=0)


def test_commitments_of_registered_hotkeys_only(chain: SubtensorChain, fake: FakeSubstrate) -> None:
    long_text = "https://k:" + "s" * 150 + "@example.com/bucket-a?region=auto"  # spans two Raw fields
    fake.commit(PEER, long_text)
    fake.commit(OTHER, "file:///tmp/peer")
    fake.commit("5GoneHotkeyThatDeregisteredLongAgoXXXXXXXXXXXXXX", "https://example.com/gone")
    assert chain.commitments() == {PEER: long_text, OTHER: "file:///tmp/peer"}


def test_a_commitment_the_sdk_cannot_decode_costs_only_its_own_hotkey(
    chain: SubtensorChain, fake: FakeSubstrate
) -> None:
    """A revealed payload whose SCALE bytes read as text starting "0x" (the length byte of 12 bytes
    is "0"): the SDK's bulk read takes it for hex and raised for the whole subnet, every window."""
    hostile = (bytes([12 << 2]) + b"xyz-not-hex!").decode()
    fake.commit(PEER, "https://example.com/bucket-a")
    fake.reveal(OTHER, hostile)
    fake.reveal("5GoneHotkeyThatDeregisteredLongAgoXXXXXXXXXXXXXX", hostile)
    with pytest.raises(ValueError):  # what the window's fetch stage met before
        chain._client.subnets.commitments(NETUID)
    assert chain.commitments() == {PEER: "https://example.com/bucket-a"}


def test_sealed_commitments_are_left_out_until_the_chain_reveals_them(
    chain: SubtensorChain, fake: FakeSubstrate
) -> None:
    fake.seal(PEER, reveal_round=1_000)
    fake.commit(OTHER, "file:///tmp/peer")
    assert chain.commitments() == {OTHER: "file:///tmp/peer"}
    fake.advance(5)
    plaintext = b"https://example.com/revealed"
    fake.reveal(PEER, bytes([len(plaintext) << 2]) + plaintext)  # SCALE: compact length, then the text
    assert chain.commitments() == {PEER: "https://example.com/revealed", OTHER: "file:///tmp/peer"}


def test_an_old_blocks_time_on_a_pruned_node_is_estimated_from_the_head(
    chain: SubtensorChain, fake: FakeSubstrate
) -> None:
    """A validator catching up on a lite node: the old block's state is gone for good, and the
    window that needs its time would be retried forever."""
    fake.pruned_after = 256
    fake.advance(1_900)
    assert chain.block_timestamp(100) == GENESIS_MS / 1000 + 100 * 12.0
    fake.pruned_after = 0  # a recent block that cannot be read is a transient error: retried
    with pytest.raises(bt.BittensorError):
        chain.block_timestamp(1_990)


def test_a_set_that_reached_the_chain_stays_ok_when_the_head_cannot_be_read(
    chain: SubtensorChain, fake: FakeSubstrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reported as failed, a set already on chain would be set again and its work paid twice."""
    submit = fake.submit

    async def submit_then_drop(*args: object, **kwargs: object) -> object:
        result = await submit(*args, **kwargs)  # type: ignore[arg-type]

        async def reset() -> int:
            raise ConnectionResetError("connection reset by peer")

        monkeypatch.setattr(fake, "block_number", reset)
        return result

    monkeypatch.setattr(fake, "submit", submit_then_drop)
    outcome = chain.set_weights({1: 1.0})
    assert outcome.ok and outcome.block == -1, outcome.message
    assert fake.weights[0] == [(1, 65535)]


async def _never(*args: object, **kwargs: object) -> int:
    """A node that takes the request and never answers."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def _silenced(
    config: SubtensorChainConfig, fake: FakeSubstrate, mp: pytest.MonkeyPatch, *calls: str
) -> WeightOutcome:
    """A weight set against `fake` with `calls` never answered (a 0.5 s weight timeout)."""
    chain = SubtensorChain(
        dataclasses.replace(config, weight_timeout_s=0.5), client=bt.Subtensor("local", substrate=fake)
    )
    fake.register(chain.hotkey, "5Cold", stake_rao=2_500_000_000_000, permit=True)
    fake.register(PEER, "5Cold")
    chain.block()  # connected while the node still answers
    for name in calls:
        mp.setattr(fake, name, _never)
    try:
        return chain.set_weights({1: 1.0})
    finally:
        chain.close()


def test_a_set_the_node_never_answers_is_given_up(
    config: SubtensorChainConfig, fake: FakeSubstrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocking facade waits without a bound: a node that took the extrinsic and never
    reported it held the round until the transaction's era ran out, longer than a window."""
    outcome = _silenced(config, fake, monkeypatch, "submit")
    assert not outcome.ok and outcome.message == "no answer within 0.5 s"
    assert outcome.block == 100 and fake.weights == {}


def test_a_node_that_stops_answering_altogether_does_not_hang_the_record(
    config: SubtensorChainConfig, fake: FakeSubstrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subtensor, "HEAD_TIMEOUT_S", 0.3)
    outcome = _silenced(config, fake, monkeypatch, "submit", "block_number")
    assert not outcome.ok and outcome.block == -1


def test_set_weights_sends_u16_weights_signed_by_the_hotkey(
    chain: SubtensorChain, fake: FakeSubstrate
) -> None:
    outcome = chain.set_weights({1: 0.8, 2: 0.2})
    assert outcome.ok, outcome.message
    assert outcome.block == 100
    [sent] = fake.extrinsics
    assert (sent.call.module, sent.call.function) == ("SubtensorModule", "set_mechanism_weights")
    # The SDK max-upscales to u16: 0.8 -> 65535, 0.2 -> round(0.25 * 65535) = 16384.
    assert sent.call.params == {
        "netuid": 3,
        "mecid": 0,
        "dests": [1, 2],
        "weights": [65535, 16384],
        "version_key": 0,
    }
    assert sent.signer == chain.hotkey
    assert bt.Wallet("validator", "hot", path=chain.config.wallet_path or "").hotkey.verify(
        sent.call.data, sent.signature
    )
    assert fake.weights[0] == [(1, 65535), (2, 16384)]


def test_set_weights_uses_timelocked_commit_when_commit_reveal_is_on(
    chain: SubtensorChain, fake: FakeSubstrate
) -> None:
    fake.commit_reveal = True
    outcome = chain.set_weights({1: 1.0, 2: 3.0})
    assert outcome.ok, outcome.message
    assert "commit-reveal round" in outcome.message
    [sent] = fake.extrinsics
    assert sent.call.function == "commit_timelocked_mechanism_weights"
    assert sent.call.params["netuid"] == 3
    assert isinstance(sent.call.params["commit"], bytes | list | str) and sent.call.params["commit"]
    assert sent.call.params["reveal_round"] > 0


def test_rate_limit_is_refused_before_signing(chain: SubtensorChain, fake: FakeSubstrate) -> None:
    fake.rate_limit = 50
    assert chain.set_weights({1: 1.0}).ok
    fake.advance(10)
    outcome = chain.set_weights({1: 1.0})
    assert not outcome.ok
    assert "rate limit is 50 blocks" in outcome.message
    assert outcome.block == 110
    assert len(fake.extrinsics) == 1


def test_chain_side_failure_and_bad_input_are_outcomes(chain: SubtensorChain, fake: FakeSubstrate) -> None:
    fake.fail_next = "MaxWeightExceeded"
    failed = chain.set_weights({1: 1.0, 2: 1.0})
    assert (failed.ok, failed.message) == (False, "MaxWeightExceeded")
    zero = chain.set_weights({1: 0.0})
    assert not zero.ok and "All weights are zero" in zero.message


def test_unregistered_validator_is_refused(chain: SubtensorChain, fake: FakeSubstrate) -> None:
    fake.neurons.pop(0)
    outcome = chain.set_weights({0: 1.0})
    assert not outcome.ok
    assert "not registered" in outcome.message
    assert fake.extrinsics == []


def test_missing_subnet_raises(config: SubtensorChainConfig, fake: FakeSubstrate) -> None:
    client = bt.Subtensor("local", substrate=fake)
    wallet = bt.Wallet("validator", "hot", path=config.wallet_path or "")
    chain = SubtensorChain(SubtensorChainConfig(network="local", netuid=7), client=client, wallet=wallet)
    with pytest.raises(LookupError):
        chain.neurons()
    chain.close()


@pytest.mark.parametrize(
    "kwargs", [{"network": ""}, {"netuid": 70000}, {"wallet_name": ""}, {"weight_retries": -1}]
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SubtensorChainConfig(**kwargs)  # type: ignore[arg-type]


def test_windows() -> None:
    assert window_of(0, 115) == 0
    assert window_of(114, 115) == 0
    assert window_of(115, 115) == 1
    assert first_block(3, 115) == 345
    assert WindowConfig(10).window_of(29) == 2
    assert WindowConfig(10).first_block(2) == 20
    with pytest.raises(ValueError):
        WindowConfig(0)
    with pytest.raises(ValueError):
        window_of(-1, 115)


def test_the_subnets_limits_are_read_and_a_self_weight_is_exempt(config: SubtensorChainConfig) -> None:
    fake = FakeSubstrate(netuid=NETUID, head=100, min_allowed_weights=3)
    chain = SubtensorChain(config, client=bt.Subtensor("local", substrate=fake))
    try:
        fake.register(chain.hotkey, "5Cold", stake_rao=2_500_000_000_000, permit=True)
        fake.register(PEER, "5Cold")
        fake.register(OTHER, "5Cold")
        limits = chain.weight_limits()
        assert limits == WeightLimits(3, 1.0)
        assert not chain.set_weights({1: 1.0}).ok  # under the minimum: the SDK refuses it
        padded = conformed({1: 1.0}, 0, [0, 1, 2], limits)
        assert chain.set_weights(padded).ok
        assert fake.weights[0] == [(0, 1), (1, 65535), (2, 1)]  # the pads kept at one u16 step
        # a weight the quantisation drops does not count towards the minimum
        assert chain.set_weights(conformed({1: 1.0, 2: 1e-9}, 0, [0, 1, 2], limits)).ok
        assert chain.set_weights(conformed({}, 0, [0, 1, 2], limits)).ok  # a self-weight alone
    finally:
        chain.close()


def test_a_padded_set_passes_the_subnets_largest_share_through_the_sdk(config: SubtensorChainConfig) -> None:
    """Through the SDK's own clip and the pallet's check: paid sets that can carry the subnet's
    largest share, padded to its minimum, are accepted, the pads at one u16 step (clipped onto the
    limit by the SDK, the u16 rounding put 5 of 40 such sets over it, in review); two paid uids
    cannot carry 0.4: the SDK names each at 1/2 and the chain refuses (the caller withholds)."""
    fake = FakeSubstrate(netuid=NETUID, head=100, min_allowed_weights=19, max_weights_limit=16383)
    chain = SubtensorChain(config, client=bt.Subtensor("local", substrate=fake))
    try:
        fake.register(chain.hotkey, "5Cold", stake_rao=2_500_000_000_000, permit=True)
        for i in range(30):
            fake.register(Keypair.create_from_uri(f"//Peer{i}").ss58_address, "5Cold")
        limits = chain.weight_limits()
        assert limits == WeightLimits(19, 16383 / 65535)
        rng, uids, tried = random.Random(5), list(range(31)), 0
        for _ in range(40):
            paid = {20 - i: rng.random() for i in range(rng.randint(5, 18))}
            sent = conformed(paid, 0, uids, limits)
            if not accepted(sent, limits, 0):
                continue
            tried += 1
            fake.head += 1000  # past the rate limit
            assert chain.set_weights(sent).ok, paid
            values = dict(fake.weights[0])
            assert max(values.values()) * 65535 <= 16383 * sum(values.values())
            assert all(values[u] == 1 for u in set(values) - set(paid))
        assert tried >= 30
        two = conformed({5: 0.7, 6: 0.3}, 0, uids, WeightLimits(0, 26214 / 65535))
        assert not accepted(two, WeightLimits(0, 26214 / 65535), 0)
        fake.max_weights_limit, fake.min_allowed_weights = 26214, 0
        fake.head += 1000
        assert not chain.set_weights(two).ok  # what the chain says to it
        fake.head += 1000
        assert chain.set_weights({0: 1.0}).ok  # the self-weight the caller sends instead
    finally:
        chain.close()


def test_a_read_the_node_never_answers_raises_instead_of_holding_the_round(
    config: SubtensorChainConfig, fake: FakeSubstrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocking facade waits on its loop without a bound: a node that took the metagraph or
    commitments query and never answered held the fetch stage for good. Raised, the round is
    retried from storage (validator/service.py)."""
    chain = SubtensorChain(
        dataclasses.replace(config, read_timeout_s=0.3), client=bt.Subtensor("local", substrate=fake)
    )
    fake.register(chain.hotkey, "5Cold", stake_rao=2_500_000_000_000, permit=True)
    fake.commit(chain.hotkey, "https://example.com/own")
    try:
        assert chain.block() == 100 and chain.neurons()  # answered while the node answers
        monkeypatch.setattr(fake, "runtime_call", _never)
        monkeypatch.setattr(fake, "query_map", _never)
        with pytest.raises(TimeoutError):
            chain.neurons()
        with pytest.raises(TimeoutError):
            chain.commitments()
    finally:
        chain.close()


def test_a_first_connection_the_node_never_answers_raises(
    config: SubtensorChainConfig, fake: FakeSubstrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The facade's connect() has no bound, and the SDK reads the chain during it: a node that took
    the socket and never answered held startup (the first head read) or the wait for a window."""
    chain = SubtensorChain(
        dataclasses.replace(config, read_timeout_s=0.3), client=bt.Subtensor("local", substrate=fake)
    )
    answer = fake.connect
    monkeypatch.setattr(fake, "connect", _never)
    try:
        with pytest.raises(TimeoutError):
            chain.block()
        with pytest.raises(TimeoutError):
            chain.wait_for_block(101, timeout=0.2)
        monkeypatch.setattr(fake, "connect", answer)  # the node answers again: the next call connects
        assert chain.block() == 100
        assert chain.wait_for_block(101, timeout=5.0) == 101
    finally:
        chain.close()


def test_the_chain_refuses_a_set_naming_a_uid_it_does_not_hold(
    chain: SubtensorChain, fake: FakeSubstrate
) -> None:
    """The pallet's rule, modelled by the fake: the SDK sends such a set (and pays its fee)."""
    outcome = chain.set_weights({1: 0.5, 40: 0.5})
    assert not outcome.ok and "UidVecContainInvalidOne" in outcome.message and fake.weights == {}
