"""A generated corpus for tests and the demo (nothing may be downloaded).

Text from a small probabilistic grammar over an invented lexicon, tokenized to bytes: it has real
structure (spelling, word classes, agreement between a subject and its verbs, Zipf frequencies), so a
tiny model learns it in seconds, and enough randomness that every page is distinct, so a model that
trained on a page remembers it (the assigned-vs-held-out signal of LossScore).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scoring.data import DTYPES, MANIFEST_NAME, Manifest, Shard, file_digest

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "sh", "tr", "pl")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
BYTE_VOCAB = 256


@dataclass(frozen=True, slots=True)
class CorpusConfig:
    """Lexicon sizes; each noun prefers `verbs_per_noun` verbs (the agreement the model can learn)."""

    nouns: int = 80
    verbs: int = 40
    adjectives: int = 30
    adverbs: int = 12
    verbs_per_noun: int = 4
    zipf: float = 1.1

    def __post_init__(self) -> None:
        if min(self.nouns, self.verbs, self.adjectives, self.adverbs) <= 0:
            raise ValueError("lexicon sizes must be positive")
        if not 0 < self.verbs_per_noun <= self.verbs or self.zipf <= 0:
            raise ValueError("verbs_per_noun must be in (0, verbs] and zipf positive")


class Grammar:
    """Sentence source: S -> NP VP '.', NP -> det [adj] noun [prep NP], VP -> verb (NP | adverb)."""

    def __init__(self, rng: np.random.Generator, cfg: CorpusConfig) -> None:
        self.rng, self.cfg = rng, cfg
        self._cdfs: dict[int, np.ndarray] = {}
        self.nouns = self._words(cfg.nouns, 2)
        self.verbs = [w + "s" for w in self._words(cfg.verbs, 2)]
        self.adjectives = self._words(cfg.adjectives, 3)
        self.adverbs = [w + "ly" for w in self._words(cfg.adverbs, 2)]
        self.dets = ["the", "a", "every", "some", "that"]
        self.preps = ["of", "near", "with", "under", "for"]
        self.noun_verbs = [rng.choice(cfg.verbs, cfg.verbs_per_noun, replace=False) for _ in self.nouns]

    def _words(self, n: int, max_syllables: int) -> list[str]:
        words: set[str] = set()
        while len(words) < n:
            k = int(self.rng.integers(1, max_syllables + 1))
            words.add("".join(self.rng.choice(ONSETS) + self.rng.choice(VOWELS) for _ in range(k)))
        return sorted(words)

    def _zipf(self, n: int) -> int:
        cdf = self._cdfs.get(n)
        if cdf is None:
            weights = 1.0 / np.arange(1, n + 1) ** self.cfg.zipf
            cdf = self._cdfs[n] = np.cumsum(weights / weights.sum())
        return min(int(np.searchsorted(cdf, self.rng.random(), side="right")), n - 1)

    def noun_phrase(self, depth: int) -> tuple[list[str], int]:
        words = [self.dets[self._zipf(len(self.dets))]]
        if self.rng.random() < 0.4:
            words.append(self.adjectives[self._zipf(len(self.adjectives))])
        head = self._zipf(len(self.nouns))
        words.append(self.nouns[head])
        if depth < 2 and self.rng.random() < 0.25:
            words.append(self.preps[self._zipf(len(self.preps))])
            words.extend(self.noun_phrase(depth + 1)[0])
        return words, head

    def sentence(self) -> str:
        subject, head = self.noun_phrase(0)
        verbs = self.noun_verbs[head]
        words = [*subject, self.verbs[int(verbs[self._zipf(len(verbs))])]]
        if self.rng.random() < 0.7:
            words.extend(self.noun_phrase(1)[0])
        else:
            words.append(self.adverbs[self._zipf(len(self.adverbs))])
        text = " ".join(words)
        return text[0].upper() + text[1:] + ". "


def generate_text(n_chars: int, *, seed: int, cfg: CorpusConfig | None = None) -> str:
    """At least `n_chars` characters of grammar text, identical for the same seed."""
    rng = np.random.Generator(np.random.PCG64(seed))
    grammar = Grammar(rng, cfg or CorpusConfig())
    parts: list[str] = []
    size = 0
    while size < n_chars:
        s = grammar.sentence()
        parts.append(s)
        size += len(s)
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class ShardFormat:
    """How a shard file stores its tokens: `dtype` (a key of scoring.data.DTYPES), in a `.npy`
    file or, when `raw`, as bare little-endian values in a `.bin` file."""

    dtype: str = "uint16"
    raw: bool = False


def generate_corpus(
    path: str | Path,
    *,
    seed: int,
    n_tokens: int,
    shard_tokens: int,
    fmt: ShardFormat = ShardFormat(),
    cfg: CorpusConfig | None = None,
) -> Manifest:
    """Write byte-tokenized grammar text as shards (in `fmt`) plus `manifest.json`."""
    if n_tokens <= 0 or shard_tokens <= 0:
        raise ValueError("n_tokens and shard_tokens must be positive")
    dtype, raw = fmt.dtype, fmt.raw
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    text = generate_text(n_tokens, seed=seed, cfg=cfg)[:n_tokens]
    tokens = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(DTYPES[dtype])
    shards = []
    for i, start in enumerate(range(0, n_tokens, shard_tokens)):
        chunk = tokens[start : start + shard_tokens]
        file = root / f"shard_{i:05d}.{'bin' if raw else 'npy'}"
        if raw:
            chunk.astype(chunk.dtype.newbyteorder("<")).tofile(file)
        else:
            np.save(file, chunk)
        shards.append(Shard(file.name, int(chunk.shape[0]), file_digest(file)))
    manifest = Manifest(vocab_size=BYTE_VOCAB, dtype=dtype, shards=tuple(shards))
    (root / MANIFEST_NAME).write_text(json.dumps(manifest.to_json(), indent=2))
    return manifest
