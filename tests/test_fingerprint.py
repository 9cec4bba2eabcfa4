from __future__ import annotations

import hashlib

import torch

from scoring.fingerprint import checkpoint_fingerprint, next_base


def test_next_base_is_order_free_and_literal() -> None:
    base = "00" * 32
    expected = hashlib.sha256(f"{base}|aa|bb".encode()).hexdigest()
    assert next_base(base, ["bb", "aa"]) == expected == next_base(base, ("aa", "bb"))
    assert next_base(base, []) == hashlib.sha256(base.encode()).hexdigest()
    assert next_base(base, ["aa"]) != next_base(base, ["bb"])


def test_checkpoint_fingerprint_sees_one_bit() -> None:
    a = {"w": torch.zeros(3, 4), "b": torch.ones(2)}
    b = {"b": torch.ones(2), "w": torch.zeros(3, 4)}
    assert checkpoint_fingerprint(a) == checkpoint_fingerprint(b)
    c = {
        "w": torch.zeros(3, 4),
        "b": torch.tensor([1.0, torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))]),
    }
    assert checkpoint_fingerprint(a) != checkpoint_fingerprint(c)
    assert checkpoint_fingerprint({"w": torch.zeros(12)}) != checkpoint_fingerprint({"w": torch.zeros(3, 4)})
