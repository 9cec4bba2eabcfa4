"""`LocalChain`: a chain in one SQLite file, for the demo and end-to-end tests.

Blocks advance only when told (`advance`, or `wait_for_block` with `auto_advance`), and block b's
timestamp is `genesis_time + block_seconds * b`, so runs are deterministic and never wait on a
wall clock. Several processes (the validator, simulated peers) may share the file: every call
opens its own short SQLite transaction.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from validator.chain.protocol import BLOCK_SECONDS, Neuron, WeightLimits, WeightOutcome
from validator.chain.weight_rules import U16_MAX, quantized, sdk_clipped, within_share

_SCHEMA = """
CREATE TABLE IF NOT EXISTS head (id INTEGER PRIMARY KEY CHECK (id = 0), block INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS neurons (
    uid INTEGER PRIMARY KEY, hotkey TEXT NOT NULL UNIQUE, stake REAL NOT NULL, permit INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS commitments (hotkey TEXT PRIMARY KEY, block INTEGER NOT NULL, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS weight_sets (
    id INTEGER PRIMARY KEY AUTOINCREMENT, block INTEGER NOT NULL, hotkey TEXT NOT NULL, weights TEXT NOT NULL
);
INSERT OR IGNORE INTO head (id, block) VALUES (0, 0);
"""


@dataclass(frozen=True, slots=True)
class LocalChainConfig:
    """Where the chain lives, its clock, and which hotkey sets weights through it."""

    path: Path
    validator_hotkey: str = "validator"
    genesis_time: float = 1_700_000_000.0
    block_seconds: float = BLOCK_SECONDS
    auto_advance: bool = True  # wait_for_block jumps the clock instead of waiting
    poll_seconds: float = 0.05  # when another process drives the clock
    weights_rate_limit: int = 0  # blocks between weight sets, as the subnet's hyperparameter
    min_allowed_weights: int = 0  # the fewest uids a set may name (a self-weight alone is exempt)
    # the largest share one uid may take, in 65535ths (MaxWeightsLimit; a self-weight is exempt)
    max_weights_limit: int = 65535

    def __post_init__(self) -> None:
        if not self.validator_hotkey:
            raise ValueError("validator_hotkey must be non-empty")
        if self.block_seconds <= 0 or self.poll_seconds <= 0:
            raise ValueError("block_seconds and poll_seconds must be > 0")
        if self.weights_rate_limit < 0 or self.min_allowed_weights < 0:
            raise ValueError("weights_rate_limit and min_allowed_weights must be >= 0")
        if not 0 < self.max_weights_limit <= 65535:
            raise ValueError("max_weights_limit must be in 1..65535")


@dataclass(frozen=True, slots=True)
class WeightSet:
    """One recorded `set_weights` call."""

    block: int
    hotkey: str
    weights: dict[int, float]


class LocalChain:
    """The `Chain` protocol over SQLite, plus the controls a test or the demo needs."""

    def __init__(self, config: LocalChainConfig) -> None:
        self.config = config
        config.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.config.path, timeout=10.0)
        try:
            with db:  # one transaction: commit on success, roll back on error
                yield db
        finally:
            db.close()

    # Chain protocol -------------------------------------------------------------------

    def block(self) -> int:
        with self._db() as db:
            return int(db.execute("SELECT block FROM head").fetchone()[0])

    def block_timestamp(self, block: int) -> float:
        if block < 0:
            raise ValueError(f"block must be >= 0, got {block}")
        return self.config.genesis_time + self.config.block_seconds * block

    def wait_for_block(self, block: int, timeout: float) -> int:
        head = self.block()
        if head >= block:
            return head
        if self.config.auto_advance:
            return self.advance(block - head)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(self.config.poll_seconds)
            head = self.block()
            if head >= block:
                return head
        raise TimeoutError(f"block {block} not reached within {timeout} s (head {head})")

    def neurons(self) -> list[Neuron]:
        with self._db() as db:
            rows = db.execute("SELECT uid, hotkey, stake, permit FROM neurons ORDER BY uid").fetchall()
        return [Neuron(int(u), str(h), float(s), bool(p)) for u, h, s, p in rows]

    def commitments(self) -> dict[str, str]:
        with self._db() as db:
            rows = db.execute("SELECT hotkey, text FROM commitments ORDER BY hotkey").fetchall()
        return {str(h): str(t) for h, t in rows}

    @property
    def hotkey(self) -> str:
        return self.config.validator_hotkey

    def weight_limits(self) -> WeightLimits:
        return WeightLimits(self.config.min_allowed_weights, self._max_share)

    @property
    def _max_share(self) -> float:
        return self.config.max_weights_limit / U16_MAX

    def set_weights(self, weights: dict[int, float]) -> WeightOutcome:
        hotkey = self.config.validator_hotkey
        with self._db() as db:
            head = int(db.execute("SELECT block FROM head").fetchone()[0])
            error, clean = self._check_weights(db, weights, head)
            if error:
                return WeightOutcome(False, error, head)
            db.execute(
                "INSERT INTO weight_sets (block, hotkey, weights) VALUES (?, ?, ?)",
                (head, hotkey, json.dumps(clean)),
            )
        return WeightOutcome(True, f"weights set for {len(clean)} uids", head)

    def _check_weights(
        self, db: sqlite3.Connection, weights: dict[int, float], head: int
    ) -> tuple[str, dict[int, float]]:
        """The refusal a real chain would give ("" when the weights are acceptable), and the
        weights as the SDK sends them: clipped to the subnet's largest share."""
        uids = {int(row[0]) for row in db.execute("SELECT uid FROM neurons")}
        hotkeys = {str(row[0]) for row in db.execute("SELECT hotkey FROM neurons")}
        if self.config.validator_hotkey not in hotkeys:
            return f"NotRegistered: {self.config.validator_hotkey} is not registered", {}
        if unknown := sorted(set(weights) - uids):
            return f"UidVecContainInvalidOne: unknown uids {unknown}", {}
        if any(not math.isfinite(w) or w < 0 for w in weights.values()):
            return "weights must be finite and non-negative", {}
        if not any(w > 0 for w in weights.values()):
            return "All weights are zero; nothing to set.", {}
        own = db.execute(
            "SELECT uid FROM neurons WHERE hotkey = ?", (self.config.validator_hotkey,)
        ).fetchone()
        named = len(quantized(weights))  # the chain counts the u16 values the SDK sends, not zeros
        self_weight = set(weights) == {int(own[0])}
        if named < self.config.min_allowed_weights and not self_weight:
            minimum = self.config.min_allowed_weights
            return f"min_allowed_weights: {named} uids named, at least {minimum} needed", {}
        # as the SDK sends them: clipped to the largest share (a lone self-weight stays whole)
        clean = sdk_clipped({int(uid): float(w) for uid, w in sorted(weights.items())}, self._max_share)
        if not self_weight and not within_share(clean, self.weight_limits()):
            return "MaxWeightExceeded: a uid's share is above max_weights_limit once the SDK has clipped", {}
        last = db.execute(
            "SELECT MAX(block) FROM weight_sets WHERE hotkey = ?", (self.config.validator_hotkey,)
        ).fetchone()[0]
        limit = self.config.weights_rate_limit
        if last is not None and limit and head - int(last) < limit:
            return f"SettingWeightsTooFast: last set at block {last}, rate limit {limit} blocks", {}
        return "", clean

    # Controls for the demo and tests ---------------------------------------------------

    def advance(self, blocks: int = 1) -> int:
        """Move the head forward; returns the new head."""
        if blocks < 0:
            raise ValueError(f"blocks must be >= 0, got {blocks}")
        with self._db() as db:
            db.execute("UPDATE head SET block = block + ?", (blocks,))
            return int(db.execute("SELECT block FROM head").fetchone()[0])

    def register(self, hotkey: str, uid: int | None = None, stake: float = 0.0, permit: bool = False) -> int:
        """Register a hotkey at `uid` (default: the next free uid). A reused uid drops its old
        hotkey and that hotkey's commitment, as deregistration does on chain."""
        if not hotkey:
            raise ValueError("hotkey must be non-empty")
        with self._db() as db:
            if uid is None:
                uid = int(db.execute("SELECT COALESCE(MAX(uid) + 1, 0) FROM neurons").fetchone()[0])
            old = db.execute("SELECT hotkey FROM neurons WHERE uid = ?", (uid,)).fetchone()
            if old is not None and old[0] != hotkey:
                db.execute("DELETE FROM commitments WHERE hotkey = ?", (old[0],))
            db.execute("DELETE FROM neurons WHERE uid = ? OR hotkey = ?", (uid, hotkey))
            db.execute("INSERT INTO neurons VALUES (?, ?, ?, ?)", (uid, hotkey, float(stake), int(permit)))
        return uid

    def commit(self, hotkey: str, text: str) -> None:
        """Publish a registered hotkey's commitment (its storage location) at the head block."""
        with self._db() as db:
            if db.execute("SELECT 1 FROM neurons WHERE hotkey = ?", (hotkey,)).fetchone() is None:
                raise LookupError(f"{hotkey} is not registered")
            head = int(db.execute("SELECT block FROM head").fetchone()[0])
            db.execute("INSERT OR REPLACE INTO commitments VALUES (?, ?, ?)", (hotkey, head, text))

    def weight_sets(self) -> list[WeightSet]:
        """Every recorded weight set, oldest first."""
        with self._db() as db:
            rows = db.execute("SELECT block, hotkey, weights FROM weight_sets ORDER BY id").fetchall()
        return [
            WeightSet(int(b), str(h), {int(k): float(v) for k, v in json.loads(w).items()})
            for b, h, w in rows
        ]
