"""An in-memory chain implementing the bittensor SDK's `Substrate` protocol (bittensor/_substrate.py).

Pass it as `bt.Subtensor("local", substrate=FakeSubstrate(...))`: the SDK's own reads, metagraph
decoding, `SetWeights` preflight, u16 conversion and commit-reveal path run unchanged against it.
It registers neurons, stores commitments, records every submitted extrinsic and produces a new
block each time a subscriber asks for one. Unknown storage items raise, so a new SDK read shows
up as a loud test failure rather than a silent None.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from bittensor.balance import Balance
from bittensor.result import ChainError, ExtrinsicResult

GENESIS_MS = 1_700_000_000_000
BLOCK_MS = 12_000


@dataclass
class FakeNeuron:
    hotkey: str
    coldkey: str
    stake_rao: int = 0
    validator_permit: bool = False


@dataclass
class FakeCall:
    """A composed call: what `compose` returns and what `submit` records."""

    module: str
    function: str
    params: dict[str, Any]

    @property
    def data(self) -> bytes:
        return repr((self.module, self.function, sorted(self.params.items()))).encode()


@dataclass
class Extrinsic:
    block: int
    signer: str
    call: FakeCall
    signature: bytes


@dataclass
class FakeSubstrate:
    """Chain state for one subnet plus the log of extrinsics the SDK sent."""

    netuid: int = 3
    head: int = 100
    neurons: list[FakeNeuron] = field(default_factory=list)
    commitments: dict[str, tuple[int, str]] = field(default_factory=dict)
    sealed: dict[str, tuple[int, int]] = field(default_factory=dict)  # hotkey -> (block, drand round)
    revealed: dict[str, list[tuple[Any, int]]] = field(default_factory=dict)  # (payload, reveal block)
    pruned_after: int | None = None  # blocks of state kept (a lite node); None: an archive node
    commit_reveal: bool = False
    rate_limit: int = 0
    min_allowed_weights: int = 0
    max_weights_limit: int = 65535
    tempo: int = 360
    last_update: dict[int, int] = field(default_factory=dict)
    weights: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    extrinsics: list[Extrinsic] = field(default_factory=list)
    fail_next: str | None = None  # a dispatch error name for the next submit
    token_symbols: dict[int, str] = field(default_factory=dict)

    # Test helpers -----------------------------------------------------------------

    def register(self, hotkey: str, coldkey: str, stake_rao: int = 0, permit: bool = False) -> int:
        self.neurons.append(FakeNeuron(hotkey, coldkey, stake_rao, permit))
        return len(self.neurons) - 1

    def commit(self, hotkey: str, text: str) -> None:
        self.commitments[hotkey] = (self.head, text)

    def seal(self, hotkey: str, reveal_round: int) -> None:
        """A timelocked commitment, sealed until drand's `reveal_round`."""
        self.sealed[hotkey] = (self.head, reveal_round)

    def reveal(self, hotkey: str, payload: Any) -> None:
        """The chain decrypted `hotkey`'s commitment: `payload` as the transport hands it over."""
        self.sealed.pop(hotkey, None)
        self.revealed.setdefault(hotkey, []).append((payload, self.head))

    def advance(self, blocks: int = 1) -> int:
        self.head += blocks
        return self.head

    def timestamp_ms(self, block: int) -> int:
        return GENESIS_MS + BLOCK_MS * block

    def _uid(self, hotkey: str) -> int | None:
        return next((i for i, n in enumerate(self.neurons) if n.hotkey == hotkey), None)

    def _block_of(self, block_hash: str | None) -> int:
        return self.head if block_hash is None else int(block_hash, 16)

    # Substrate protocol: lifecycle and blocks --------------------------------------

    def balance(self, rao: int, netuid: int = 0) -> Balance:
        return Balance(int(rao), netuid, self.token_symbols.get(netuid))

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def block_hash(self, block: int | None = None) -> str:
        return f"0x{(self.head if block is None else block):064x}"

    async def block_number(self) -> int:
        return self.head

    async def finalized_block_number(self) -> int:
        return self.head

    async def block_time(self) -> float:
        return BLOCK_MS / 1000

    async def spec_version(self) -> int:
        return 400

    async def blocks(self, *, finalized: bool = False) -> AsyncIterator[dict[str, Any]]:
        # Each subscriber pull produces the next block, so waits finish without real time.
        while True:
            self.advance(1)
            yield {"header": {"number": self.head, "parentHash": await self.block_hash(self.head - 1)}}

    async def events(self, block_hash: str | None = None) -> list[dict[str, Any]]:
        return []

    # Reads ------------------------------------------------------------------------------

    async def query(
        self,
        module: str,
        storage_function: str,
        params: list[Any] | None = None,
        block_hash: str | None = None,
    ) -> Any:
        params = params or []
        key = (module, storage_function)
        block = self._block_of(block_hash)
        if key == ("Timestamp", "Now"):
            if self.pruned_after is not None and block < self.head - self.pruned_after:
                raise ChainError(f"State already discarded for block {block}")
            return self.timestamp_ms(block)
        if key == ("SubtensorModule", "Uids"):
            return self._uid(params[1])
        if key == ("SubtensorModule", "LastUpdate"):
            return [self.last_update.get(uid, 0) for uid in range(len(self.neurons))]
        if key == ("SubtensorModule", "ValidatorPermit"):
            return [n.validator_permit for n in self.neurons]
        simple = {
            "CommitRevealWeightsEnabled": self.commit_reveal,
            "WeightsSetRateLimit": self.rate_limit,
            "MinAllowedWeights": self.min_allowed_weights,
            "MaxWeightsLimit": self.max_weights_limit,
            "SubnetEpochConsensus": "Yuma",
            "Tempo": self.tempo,
            "RevealPeriodEpochs": 1,
            "LastEpochBlock": block - block % self.tempo,
            "PendingEpochAt": 0,
            "SubnetEpochIndex": block // self.tempo,
            "BlocksSinceLastStep": block % self.tempo,
        }
        if module == "SubtensorModule" and storage_function in simple:
            return simple[storage_function]
        raise NotImplementedError(f"FakeSubstrate.query({module}.{storage_function})")

    async def query_map(
        self,
        module: str,
        storage_function: str,
        params: list[Any] | None = None,
        block_hash: str | None = None,
    ) -> list[tuple[Any, Any]]:
        key = (module, storage_function)
        if key == ("Commitments", "CommitmentOf"):
            plain = [(hk, _commitment_record(b, text)) for hk, (b, text) in self.commitments.items()]
            return plain + [(hk, _sealed_record(b, r)) for hk, (b, r) in self.sealed.items()]
        if key == ("Commitments", "RevealedCommitments"):
            return list(self.revealed.items())
        if key == ("SubtensorModule", "Uids"):
            return [(n.hotkey, uid) for uid, n in enumerate(self.neurons)]
        if key == ("SubtensorModule", "TokenSymbol"):
            return []
        raise NotImplementedError(f"FakeSubstrate.query_map({module}.{storage_function})")

    async def runtime_call(
        self, api: str, method: str, params: list[Any], block_hash: str | None = None
    ) -> Any:
        if (api, method) != ("SubnetInfoRuntimeApi", "get_metagraph"):
            raise NotImplementedError(f"FakeSubstrate.runtime_call({api}.{method})")
        if params != [self.netuid]:
            return None
        return self._metagraph(self._block_of(block_hash))

    def _metagraph(self, block: int) -> dict[str, Any]:
        stakes = [n.stake_rao for n in self.neurons]
        return {
            "netuid": self.netuid,
            "name": "gauntlet",
            "symbol": "γ",
            "block": block,
            "tempo": self.tempo,
            "last_step": block - block % self.tempo,
            "blocks_since_last_step": block % self.tempo,
            "owner_hotkey": self.neurons[0].hotkey if self.neurons else "",
            "owner_coldkey": self.neurons[0].coldkey if self.neurons else "",
            "network_registered_at": 1,
            "hotkeys": [n.hotkey for n in self.neurons],
            "coldkeys": [n.coldkey for n in self.neurons],
            "validator_permit": [n.validator_permit for n in self.neurons],
            "active": [True] * len(self.neurons),
            "alpha_stake": stakes,
            "tao_stake": [0] * len(stakes),
            "total_stake": stakes,
        }

    # Calls and writes ---------------------------------------------------------------------

    async def compose(self, call: Any) -> FakeCall:
        module, function, params = call
        return FakeCall(module, function, dict(params))

    async def estimate_fee(self, call: Any, keypair: Any) -> Balance:
        return Balance.from_rao(1000)

    async def submit(self, call: FakeCall, keypair: Any, **_options: Any) -> ExtrinsicResult:
        # Signing proves the SDK handed over a usable key, as the real transport would need.
        signature = bytes(keypair.sign(call.data))
        self.extrinsics.append(Extrinsic(self.head, str(keypair.ss58_address), call, signature))
        if self.fail_next is not None:
            name, self.fail_next = self.fail_next, None
            return ExtrinsicResult(success=False, message=name, error=ChainError(name, name))
        if any(uid >= len(self.neurons) for uid in call.params.get("dests", [])):
            name = "UidVecContainInvalidOne"  # the pallet refuses a set naming a uid it does not hold
            return ExtrinsicResult(success=False, message=name, error=ChainError(name, name))
        if self._over_max_share(call, str(keypair.ss58_address)):
            name = "MaxWeightExceeded"  # the pallet's check of the largest share (a self-weight is exempt)
            return ExtrinsicResult(success=False, message=name, error=ChainError(name, name))
        self._apply(call, str(keypair.ss58_address))
        return ExtrinsicResult(
            success=True,
            message="Success",
            block_hash=await self.block_hash(),
            extrinsic_id=f"{self.head}-0001",
        )

    # The rest of the protocol: not used by the validator's paths; loud if that changes.

    async def get_block(
        self, block_number: int | None = None, block_hash: str | None = None
    ) -> dict[str, Any] | None:
        raise NotImplementedError("FakeSubstrate.get_block")

    async def map_has_entries(
        self, module: str, storage_function: str, params: list[Any], block_hash: str | None = None
    ) -> bool:
        return bool(await self.query_map(module, storage_function, params, block_hash))

    async def query_batch(
        self, module: str, storage_function: str, param_sets: list[list[Any]], block_hash: str | None = None
    ) -> list[Any]:
        return [await self.query(module, storage_function, p, block_hash) for p in param_sets]

    async def constant(self, module: str, name: str) -> Any:
        raise NotImplementedError(f"FakeSubstrate.constant({module}.{name})")

    async def decode_scale(self, type_string: str, data: Any) -> Any:
        raise NotImplementedError("FakeSubstrate.decode_scale")

    async def estimate_weight(self, call: Any, keypair: Any) -> dict[str, int]:
        return {"ref_time": 0, "proof_size": 0}

    async def account_next_index(self, address: str) -> int:
        return sum(1 for e in self.extrinsics if e.signer == address)

    async def mev_next_key(self) -> bytes | None:
        return None

    async def sign_extrinsic(self, call: Any, keypair: Any, *, nonce: int, period: int) -> tuple[bytes, str]:
        raise NotImplementedError("FakeSubstrate.sign_extrinsic")

    async def find_extrinsic(self, extrinsic_hash: str, block_hash: str) -> ExtrinsicResult | None:
        return None

    async def prepare(self, call: Any, *, address: str, **_options: Any) -> Any:
        raise NotImplementedError("FakeSubstrate.prepare")

    async def submit_signature(
        self, unsigned: Any, signature: bytes | str, **_options: Any
    ) -> ExtrinsicResult:
        raise NotImplementedError("FakeSubstrate.submit_signature")

    async def submit_signed(self, extrinsic: Any, keypair: Any, **_options: Any) -> ExtrinsicResult:
        raise NotImplementedError("FakeSubstrate.submit_signed")

    def multisig_account(self, signatories: list[str], threshold: int) -> Any:
        raise NotImplementedError("FakeSubstrate.multisig_account")

    async def submit_multisig(
        self, call: Any, keypair: Any, multisig_account: Any, **_options: Any
    ) -> ExtrinsicResult:
        raise NotImplementedError("FakeSubstrate.submit_multisig")

    def _over_max_share(self, call: FakeCall, signer: str) -> bool:
        dests, values = call.params.get("dests", []), call.params.get("weights", [])
        if call.function != "set_mechanism_weights" or not values or list(dests) == [self._uid(signer)]:
            return False
        return max(values) * 65535 > self.max_weights_limit * sum(values)

    def _apply(self, call: FakeCall, signer: str) -> None:
        uid = self._uid(signer)
        if call.function == "set_mechanism_weights" and uid is not None:
            self.weights[uid] = list(zip(call.params["dests"], call.params["weights"], strict=True))
            self.last_update[uid] = self.head


def _commitment_record(block: int, text: str) -> dict[str, Any]:
    """A `Commitments.CommitmentOf` value as the transport decodes it: Raw fields of <= 128 bytes."""
    raw = text.encode()
    chunks = [raw[i : i + 128] for i in range(0, len(raw), 128)] or [b""]
    fields = [{f"Raw{len(c)}": "0x" + c.hex()} for c in chunks]
    return {"block": block, "deposit": 0, "info": {"fields": fields}}


def _sealed_record(block: int, reveal_round: int) -> dict[str, Any]:
    """A `CommitmentOf` value holding one timelock-encrypted field."""
    sealed = {"TimelockEncrypted": {"encrypted": "0x" + "ab" * 32, "reveal_round": reveal_round}}
    return {"block": block, "deposit": 0, "info": {"fields": [sealed]}}
