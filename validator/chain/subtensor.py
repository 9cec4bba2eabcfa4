"""`Chain` over the bittensor SDK (11.x): a blocking `bt.Subtensor` and the validator's hotkey.

The SDK does the chain-specific work: `SetWeights` conforms weights to the subnet's limits,
quantizes them to u16, preflights registration and the rate limit, and picks the plaintext or
the timelocked commit-reveal extrinsic. Its errors are surfaced in `WeightOutcome.message`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import bittensor as bt
import structlog

from validator.chain.commitment_read import visible_commitments
from validator.chain.protocol import BLOCK_SECONDS, Neuron, WeightLimits, WeightOutcome

log = structlog.get_logger(__name__)
T = TypeVar("T")
PRUNED_AFTER = 64  # blocks back beyond which a node may have discarded a block's state
HEAD_TIMEOUT_S = 10.0  # the head read that dates a weight set's record


@dataclass(frozen=True, slots=True)
class SubtensorChainConfig:
    """Which network and subnet, which wallet signs, and how weights are submitted."""

    network: str = "finney"
    netuid: int = 3
    wallet_name: str = "default"
    hotkey_name: str = "default"
    wallet_path: str | None = None  # None: the SDK default, ~/.bittensor/wallets
    version_key: int = 0
    weight_retries: int = 2  # resubmits on transient pool rejections (the SDK's `retries`)
    wait_for_finalization: bool = False
    weight_timeout_s: float = 300.0  # a set not answered by then is recorded failed and retried
    read_timeout_s: float = 120.0  # a read not answered by then raises: the round is retried

    def __post_init__(self) -> None:
        if not self.network:
            raise ValueError("network must be a name (finney/test/local) or a ws(s):// URL")
        if not 0 <= self.netuid < 65536:
            raise ValueError(f"netuid must be in 0..65535, got {self.netuid}")
        if not self.wallet_name or not self.hotkey_name:
            raise ValueError("wallet_name and hotkey_name must be non-empty")
        if self.version_key < 0 or self.weight_retries < 0:
            raise ValueError("version_key and weight_retries must be >= 0")
        if self.weight_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ValueError("weight_timeout_s and read_timeout_s must be > 0")


def open_wallet(config: SubtensorChainConfig) -> Any:
    """The configured `bt.Wallet` (keys are read lazily by the SDK)."""
    if config.wallet_path is None:
        return bt.Wallet(config.wallet_name, config.hotkey_name)
    return bt.Wallet(config.wallet_name, config.hotkey_name, path=config.wallet_path)


class SubtensorChain:
    """The production `Chain`. Pass `client` (e.g. `bt.Subtensor(net, substrate=fake)`) to inject."""

    def __init__(self, config: SubtensorChainConfig, *, client: Any = None, wallet: Any = None) -> None:
        self.config = config
        self._client: Any = client if client is not None else bt.Subtensor(config.network)
        self._wallet: Any = wallet if wallet is not None else open_wallet(config)
        # Read the hotkey now so a missing or unreadable key fails at startup, not at weight time.
        self.hotkey: str = str(self._wallet.hotkey.ss58_address)
        self.signer: Any = self._wallet.hotkey  # a Keypair: signs the published selection

    def block(self) -> int:
        return int(self._read(lambda client: client.block()))

    def block_timestamp(self, block: int) -> float:
        try:
            return float(self._read(lambda client: client.timestamp(block=block)).timestamp())
        except bt.BittensorError as error:
            head = self.block()
            if head - block < PRUNED_AFTER:
                raise  # recent state is never pruned: a transient error, the window is retried
            # A node that keeps recent state only (a lite node: 256 blocks) refuses an old block's
            # time for good, so a validator catching up would retry that window forever. The time
            # is estimated from the head's; it dates the put window, and on stores a peer runs
            # itself only the validator's own sightings time an upload (none while it was away).
            estimate = self.block_timestamp(head) - (head - block) * BLOCK_SECONDS
            log.warning("block_time_estimated", block=block, head=head, error=f"{error}"[:200])
            return estimate

    def wait_for_block(self, block: int, timeout: float) -> int:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        # The SDK bounds the wait itself (asyncio.TimeoutError, the builtin TimeoutError on 3.11);
        # the outer bound covers a first connection the facade would open without one.
        header = self._bounded(
            lambda client: client.wait_for_block(block, timeout=timeout), timeout + self.config.read_timeout_s
        )
        return int(header.number)

    def neurons(self) -> list[Neuron]:
        graph = self._read(lambda client: client.subnets.metagraph(self.config.netuid, commitments=False))
        if graph is None:
            raise LookupError(f"subnet {self.config.netuid} does not exist on {self.config.network}")
        return [
            Neuron(
                uid=int(n.uid),
                hotkey=str(n.hotkey),
                stake=float(n.total_stake.amount),  # alpha on subnets, TAO on root
                validator_permit=bool(n.validator_permit),
            )
            for n in graph.neurons
        ]

    def commitments(self) -> dict[str, str]:
        """Visible commitments of registered hotkeys (sealed or deregistered ones are left out)."""
        return self._read(lambda client: visible_commitments(client, self.config.netuid))

    def weight_limits(self) -> WeightLimits:
        async def both(client: Any) -> tuple[int, int]:
            read, netuid = client.hyperparameters, self.config.netuid
            return int(await read.min_allowed_weights(netuid)), int(await read.max_weight_limit(netuid))

        least, limit = self._read(both)
        return WeightLimits(least, min(limit, 65535) / 65535)

    def set_weights(self, weights: dict[int, float]) -> WeightOutcome:
        try:
            intent = bt.SetWeights(
                netuid=self.config.netuid,
                weights={int(uid): float(w) for uid, w in weights.items()},
                version_key=self.config.version_key,
            )
            result = self._bounded(
                lambda client: client.execute(
                    intent,
                    self._wallet,
                    retries=self.config.weight_retries,
                    wait_for_inclusion=True,
                    wait_for_finalization=self.config.wait_for_finalization,
                ),
                self.config.weight_timeout_s,
            )
        except bt.BittensorError as error:
            # Preflight refusals (rate limit, not registered, all-zero weights) and RPC failures.
            return WeightOutcome(False, f"{type(error).__name__}: {error}", self._block_or_unknown())
        except TimeoutError:
            # A node that takes the extrinsic and never reports it held the round until the
            # transaction's era ran out (128 blocks: longer than a window); the set is retried.
            message = f"no answer within {self.config.weight_timeout_s:g} s"
            return WeightOutcome(False, message, self._block_or_unknown())
        return WeightOutcome(bool(result.success), _describe(result), self._block_or_unknown())

    def _read(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """A chain read, bounded: a node that never answers raised nothing and held the round."""
        return self._bounded(work, self.config.read_timeout_s)

    def _bounded(self, work: Callable[[Any], Awaitable[T]], timeout: float) -> T:
        """`work(the SDK's async client)` on the SDK's own loop, cancelled after `timeout` seconds
        (TimeoutError): the blocking facade waits on its loop without any bound."""
        runner = self._client._loop  # bittensor 11: the facade's loop thread, whose call() takes a timeout
        client = self._client._client
        state = self._client._state  # the facade's "connected" flag: close() disconnects only if set
        if not state["connected"]:
            # The facade's own connect() is unbounded too, and it reads the chain (token symbols)
            # after the handshake: a node that accepted the socket and never answered held the
            # validator's startup for good. Raised, the next call connects afresh.
            runner.call(asyncio.wait_for(client.connect(), timeout))
            state["connected"] = True
        return cast(T, runner.call(asyncio.wait_for(work(client), timeout)))

    def close(self) -> None:
        """Close the SDK client and its private event loop."""
        self._client.close()
        # bittensor 11.3's SyncClient stops its loop thread but never closes the loop, which leaks
        # the loop's self-pipe (a ResourceWarning); close it once the thread has stopped.
        runner = getattr(self._client, "_loop_thread", None)
        loop = getattr(runner, "_loop", None)
        if loop is not None and not loop.is_running() and not loop.is_closed():
            loop.close()

    def _block_or_unknown(self) -> int:
        """The head block for the outcome record, or -1 when the chain cannot be read: any error
        here would report a set that reached the chain as failed, and the set would be repeated."""
        try:  # bounded: after a set the node never answered, an unbounded read would hang instead
            return int(self._bounded(lambda client: client.block(), HEAD_TIMEOUT_S))
        except Exception:  # the record's block is informative; the outcome is already decided
            return -1


def _describe(result: Any) -> str:
    """The SDK's message, plus the extrinsic id and the reveal round of a timelocked commit."""
    parts = [str(result.message or ("ok" if result.success else "failed"))]
    if result.extrinsic_id:
        parts.append(f"extrinsic {result.extrinsic_id}")
    reveal_round = (result.data or {}).get("reveal_round")
    if reveal_round is not None:
        parts.append(f"commit-reveal round {reveal_round}")
    return "; ".join(parts)
