"""Datasets and page draws: manifest, memory-mapped pages, deterministic public and secret draws."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from scoring.data import (
    MANIFEST_NAME,
    Dataset,
    Manifest,
    Shard,
    assigned_pages,
    batches,
    derive_seed,
    draw_pages,
    eval_sample,
    file_digest,
    heldout_from_seed,
    window_seed,
)


def write_dataset(root: Path, shards: list[np.ndarray], *, raw: bool = False) -> Dataset:
    """A dataset with the given token arrays as shards (uint16)."""
    entries = []
    for i, arr in enumerate(shards):
        file = root / f"s{i}.{'bin' if raw else 'npy'}"
        if raw:
            arr.astype("<u2").tofile(file)
        else:
            np.save(file, arr.astype(np.uint16))
        entries.append(Shard(file.name, len(arr), file_digest(file)))
    manifest = Manifest(vocab_size=1000, dtype="uint16", shards=tuple(entries))
    (root / MANIFEST_NAME).write_text(json.dumps(manifest.to_json()))
    return Dataset.open(root, seq_len=4)


@pytest.mark.parametrize("raw", [False, True])
def test_pages_span_seq_len_plus_one_within_a_shard(tmp_path: Path, raw: bool) -> None:
    # shard 0: 11 tokens -> (11 - 1) // 4 = 2 pages; shard 1: 9 tokens -> 2 pages
    ds = write_dataset(tmp_path, [np.arange(11), np.arange(100, 109)], raw=raw)
    assert ds.n_pages == 4
    assert ds.page(0).tolist() == [0, 1, 2, 3, 4]
    assert ds.page(1).tolist() == [4, 5, 6, 7, 8]
    assert ds.page(2).tolist() == [100, 101, 102, 103, 104]
    assert ds.page(3).tolist() == [104, 105, 106, 107, 108]
    assert ds.page(3).dtype == np.int64
    with pytest.raises(IndexError):
        ds.page(4)


def test_shards_are_memory_mapped_and_verified(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path, [np.arange(50)])
    assert all(isinstance(m, np.memmap) for m in ds._maps)
    assert ds.verify() == []
    np.save(tmp_path / "s0.npy", np.arange(1, 51).astype(np.uint16))
    assert ds.verify() == ["s0.npy"]


def test_manifest_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Manifest(vocab_size=70000, dtype="uint16", shards=())
    with pytest.raises(ValueError):
        Manifest(vocab_size=100, dtype="int8", shards=())
    write_dataset(tmp_path, [np.arange(50)])
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text())
    raw["shards"][0]["n_tokens"] = 49
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="manifest says 49"):
        Dataset.open(tmp_path, seq_len=4)


def test_draws_are_deterministic_distinct_and_in_range() -> None:
    a = draw_pages(derive_seed("assigned", "pub", 7, 3), 20, 100)
    assert a == draw_pages(derive_seed("assigned", "pub", 7, 3), 20, 100)
    assert len(set(a)) == 20 and all(0 <= p < 100 for p in a)
    assert a != draw_pages(derive_seed("assigned", "pub", 7, 4), 20, 100)
    # "|"-joined parts: (1, 23) and (12, 3) must not collide
    assert derive_seed(1, 23) != derive_seed(12, 3)
    with pytest.raises(ValueError):
        draw_pages(derive_seed("x"), 101, 100)


def test_assigned_heldout_and_eval_sample(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path, [np.arange(4001)])  # 1000 pages
    mine = assigned_pages(5, 9, public_seed="pub", n_pages=16, dataset=ds)
    assert mine == assigned_pages(5, 9, public_seed="pub", n_pages=16, dataset=ds)
    assert mine != assigned_pages(6, 9, public_seed="pub", n_pages=16, dataset=ds)
    seed = window_seed(b"k1", 5)
    held = heldout_from_seed(seed, n_pages=8, dataset=ds)  # replay needs only the stored seed
    assert len(seed) == 64 and len(set(held)) == 8
    assert held != heldout_from_seed(window_seed(b"k2", 5), n_pages=8, dataset=ds)
    sample = eval_sample(seed, 9, assigned=mine, k=8)
    assert len(set(sample)) == 8 and set(sample) <= set(mine)
    assert sample == eval_sample(seed, 9, assigned=mine, k=8)
    assert sample != eval_sample(window_seed(b"k2", 5), 9, assigned=mine, k=8)
    assert sorted(eval_sample(seed, 9, assigned=mine, k=99)) == sorted(mine)


def test_window_seed_is_hmac_sha256() -> None:
    # HMAC-SHA256(key=b"k", msg=b"gauntlet/window|1"), computed independently
    import hashlib
    import hmac

    expected = hmac.new(b"k", b"gauntlet/window|1", hashlib.sha256).hexdigest()
    assert window_seed(b"k", 1) == expected
    assert window_seed(b"k", 1) != window_seed(b"k", 2)


def test_batches_stack_pages_in_order(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path, [np.arange(41)])  # 10 pages
    out = batches(ds, [3, 0, 9], 2)
    assert [tuple(b.shape) for b in out] == [(2, 5), (1, 5)]
    assert out[0].dtype == torch.int64
    assert out[0][0].tolist() == [12, 13, 14, 15, 16] and out[1][0].tolist() == [36, 37, 38, 39, 40]
