"""The generated corpus: deterministic, byte tokens with learnable structure, distinct pages."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from scoring.corpus import CorpusConfig, ShardFormat, generate_corpus, generate_text
from scoring.data import Dataset


def test_text_is_deterministic_ascii_sentences() -> None:
    a = generate_text(2000, seed=1)
    assert a == generate_text(2000, seed=1)
    assert a != generate_text(2000, seed=2)
    assert len(a) >= 2000 and a.isascii()
    sentences = [s for s in a.split(". ") if s]
    assert all(s[0].isupper() for s in sentences)


def test_text_has_structure_a_model_can_learn() -> None:
    text = generate_text(50_000, seed=3)
    # Conditional entropy of the next byte given the previous two is far below a uniform byte's 8 bits.
    pairs = Counter(itertools.pairwise(text))
    triples = Counter(zip(text, text[1:], text[2:], strict=False))
    total = sum(triples.values())
    h = -sum(n / total * np.log2(n / pairs[(a, b)]) for (a, b, _), n in triples.items())
    assert h < 2.0
    # ...over a closed lexicon: 80 nouns + 40 verbs + 30 adjectives + 12 adverbs + 5 dets + 5 preps
    assert len({w.strip(".").lower() for w in text.split()}) <= 172


def test_corpus_shards_and_manifest(tmp_path: Path) -> None:
    manifest = generate_corpus(tmp_path, seed=0, n_tokens=10_000, shard_tokens=4_000)
    assert [s.n_tokens for s in manifest.shards] == [4000, 4000, 2000]
    assert (manifest.vocab_size, manifest.dtype) == (256, "uint16")
    ds = Dataset.open(tmp_path, seq_len=32)
    assert ds.verify() == []
    assert ds.n_pages == 2 * (3999 // 32) + 1999 // 32
    assert bytes(ds.page(0)[:2].astype(np.uint8)).decode().isalpha()
    again = generate_corpus(tmp_path / "b", seed=0, n_tokens=10_000, shard_tokens=4_000)
    assert [s.sha256 for s in again.shards] == [s.sha256 for s in manifest.shards]
    raw_fmt = ShardFormat(dtype="uint32", raw=True)
    raw = generate_corpus(tmp_path / "raw", seed=0, n_tokens=10_000, shard_tokens=4_000, fmt=raw_fmt)
    raw_ds = Dataset.open(tmp_path / "raw", seq_len=32)
    assert raw.shards[0].file.endswith(".bin")
    assert raw_ds.page(7).tolist() == ds.page(7).tolist()


def test_pages_are_distinct(tmp_path: Path) -> None:
    generate_corpus(tmp_path, seed=0, n_tokens=64_000, shard_tokens=64_000)
    ds = Dataset.open(tmp_path, seq_len=64)
    pages = {bytes(ds.page(i).astype(np.uint8)) for i in range(ds.n_pages)}
    assert len(pages) == ds.n_pages


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        CorpusConfig(verbs=3, verbs_per_noun=4)
    with pytest.raises(ValueError):
        generate_corpus("/nonexistent-never-written", seed=0, n_tokens=0, shard_tokens=10)
