"""A subnet's commitments read one hotkey at a time: an entry that cannot be decoded costs only the
hotkey that wrote it.

The SDK's bulk read (`subnets.commitments`) decodes every hotkey's history in one pass, so a single
entry it cannot decode raised for the whole subnet. bittensor 11.x takes any revealed payload that
reaches it as text starting with "0x" for hex: the SCALE bytes of a 12-byte plaintext starting with
"x" do (the length byte 0x30 is "0"), and `bytes.fromhex` raised in every window's fetch stage, in
every retry, from a hotkey that need not even be registered any more. Here the same storage maps
are read at one block and each registered hotkey's rows go through the SDK's own decoding alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog
from bittensor.metagraph import _commitments as decode_commitments  # the SDK's decoding, per hotkey

log = structlog.get_logger(__name__)

COMMITMENT_OF = ("Commitments", "CommitmentOf")
REVEALED = ("Commitments", "RevealedCommitments")
UIDS = ("SubtensorModule", "Uids")


async def visible_commitments(client: Any, netuid: int) -> dict[str, str]:
    """hotkey -> readable commitment text of every registered hotkey (sealed ones left out);
    `client` is the SDK's async client."""
    block = int(await client.block())
    registered = {str(hotkey) for hotkey, _ in await client.query_map(UIDS, [netuid], block=block)}
    committed = _by_hotkey(await client.query_map(COMMITMENT_OF, [netuid], block=block))
    revealed = _by_hotkey(await client.query_map(REVEALED, [netuid], block=block))
    out: dict[str, str] = {}
    for hotkey in sorted(registered & (committed.keys() | revealed.keys())):
        try:
            text = _visible(netuid, hotkey, committed.get(hotkey), revealed.get(hotkey), block)
        except Exception as error:  # a hostile entry: this hotkey has no location, the window goes on
            log.warning("commitment_unreadable", hotkey=ascii(hotkey[:70]), error=type(error).__name__)
            continue
        if text:
            out[hotkey] = text
    return out


def _by_hotkey(rows: Iterable[tuple[Any, Any]]) -> dict[str, Any]:
    return {str(hotkey): value for hotkey, value in rows}


def _visible(netuid: int, hotkey: str, record: Any, revealed: Any, block: int) -> str | None:
    committed = [] if record is None else [(hotkey, record)]
    history = [] if revealed is None else [(hotkey, revealed)]
    row = decode_commitments(netuid, committed, history, block).get(hotkey)
    if row is None or not row.is_revealed:
        return None
    value = row.value
    return value if isinstance(value, str) and value else None
