"""sr25519 signing and verification of submissions (DESIGN.md §4.4), offline, via bittensor's Keypair."""

from __future__ import annotations

from typing import Protocol

from bittensor.keyfiles import Keypair


class Signer(Protocol):
    """Anything that signs with a hotkey: a bittensor Keypair or a wallet's hotkey."""

    @property
    def ss58_address(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


def dev_keypair(uri: str) -> Keypair:
    """A development keypair from a secret URI such as `//Alice` or `//peer-3` (never for real funds)."""
    return Keypair.create_from_uri(uri)


def sign_hex(signer: Signer, message: bytes) -> str:
    return signer.sign(message).hex()


def verify_signature(hotkey: str, message: bytes, signature_hex: str) -> bool:
    """True only for a well-formed 64-byte signature by `hotkey` over `message`; never raises."""
    try:
        signature = bytes.fromhex(signature_hex)
        if len(signature) != 64:
            return False
        return bool(Keypair(ss58_address=hotkey).verify(message, signature))
    except (ValueError, TypeError):
        return False
