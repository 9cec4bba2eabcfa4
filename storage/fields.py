"""How records (storage/records.py) normalise their fields when built: sequences frozen to tuples,
windows checked, and text that came from peers made storable in both databases."""

from __future__ import annotations

from typing import Final

# Free text that can come from peers (a rejection's detail, an object key, an ETag) must never fail a
# commit: PostgreSQL's text refuses NUL, UTF-8 refuses lone surrogates, String(256) longer values.
HOTKEY_CHARS: Final = 64  # the String(64) of every hotkey column and key (storage/models.py)
DETAIL_CHARS: Final = 500
KEY_CHARS: Final = 1024
TAG_CHARS: Final = 256


def storable(text: str | None, limit: int) -> str | None:
    """`text` as both databases store it: NUL and lone surrogates escaped, then cut at `limit`."""
    if text is None:
        return None
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")[:limit]


def printable(text: str, limit: int) -> bool:
    """Printable ASCII of 1 to `limit` characters: what a key column or a header sent back holds."""
    return 0 < len(text) <= limit and text.isascii() and text.isprintable()


def storable_hotkey(hotkey: str) -> bool:
    """Can a row name `hotkey`? A chain's SS58 addresses always can; a hotkey over HOTKEY_CHARS, or
    not printable ASCII, would fail the commit of any window that recorded it (it is a key)."""
    return printable(hotkey, HOTKEY_CHARS)


def bigint(value: int | None) -> int | None:
    """`value` when a BigInteger column holds it, else None (a size a peer's store claimed)."""
    return value if value is None or -(1 << 63) <= value < 1 << 63 else None


def clean(obj: object, **limits: int) -> None:
    for name, limit in limits.items():
        object.__setattr__(obj, name, storable(getattr(obj, name), limit))


def check_window(window: int) -> None:
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")


def freeze(obj: object, *names: str) -> None:
    for name in names:  # frozen fields, normalised once
        object.__setattr__(obj, name, tuple(getattr(obj, name)))
