"""The window's selection, signed by the validator's hotkey, in the validator's own bucket.

Peers aggregate the same set as the validator by reading `gauntlet/1/selection/{window}.json`
(also served by the API). A failed upload is logged, never fatal: storage holds the record.
Format 2 carries what a peer needs to take the validator's outer step itself: each gathered update's
coefficient (scoring/selection.py) and the window's clip reference (scoring/clipping.py); with them
`θ ← θ − outer_lr · Σ weight × clip(update)`, summed in ascending order of the payload digests,
gives the model the validator moves to (`next_base` names it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from scoring.selection import Selection
from scoring.signing import Signer, sign_hex, verify_signature
from validator.round.outcomes import PeerWindow
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import publish

log = structlog.get_logger(__name__)
FORMAT = "gauntlet/selection/2"


def selection_key(window: int) -> str:
    return f"gauntlet/1/selection/{window}.json"


def selection_document(
    window: int,
    bases: tuple[str, str],
    peers: Sequence[PeerWindow],
    selection: Selection[str],
    reference: Mapping[str, float],
    outer_lr: float,
) -> dict[str, Any]:
    """The signed document: `bases` is (the window's base, the base after the outer step)."""
    by_hotkey = {p.hotkey: p for p in peers}

    def entry(hotkey: str) -> dict[str, Any]:
        p = by_hotkey[hotkey]
        return {"uid": p.uid, "hotkey": hotkey, "digest": p.update.digest if p.update else None}

    # null weights: the plain mean Σ clip(update) / R, as aggregate_into takes no weights
    weights: Sequence[float | None] = selection.weights or [None] * len(selection.gather)
    return {
        "format": FORMAT,
        "window": window,
        "base": bases[0],
        "next_base": bases[1],
        "outer_lr": outer_lr,
        "clip_reference": dict(sorted(reference.items())),
        "gather": [entry(h) | {"weight": w} for h, w in zip(selection.gather, weights, strict=True)],
        "reserve": [entry(h) for h in selection.reserve],
    }


def canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def verify_selection(payload: bytes, validator_hotkey: str) -> bool:
    """What a peer checks: the document is signed by the validator it trusts (not merely by the key
    the document names)."""
    try:
        signed = json.loads(payload)
        if signed["validator"] != validator_hotkey:
            return False
        return verify_signature(validator_hotkey, canonical(signed["selection"]), signed["signature"])
    except (ValueError, KeyError, TypeError):
        return False


@dataclass(frozen=True, slots=True)
class SelectionPublisher:
    location: StorageLocation | None = None
    signer: Signer | None = None

    def publish(self, document: dict[str, Any]) -> bool:
        if self.location is None or self.signer is None:
            return False
        payload = {
            "selection": document,
            "validator": self.signer.ss58_address,
            "signature": sign_hex(self.signer, canonical(document)),
        }
        try:
            asyncio.run(publish(self.location, selection_key(document["window"]), canonical(payload)))
        except Exception as e:  # an unreachable bucket must not fail a committed window
            log.warning("selection_not_published", window=document["window"], error=str(e))
            return False
        return True
