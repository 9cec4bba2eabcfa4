"""Recycled work across windows, on real updates of the tiny model (scoring/recycling.py, issue 12).

Honest peers train two windows with error feedback, the model advancing by their mean in between.
Another peer's last update with a few codes changed, the last global aggregate re-encoded, and the
last update with noise added and re-sparsified are caught; honest peers never are, at one inner step
(their updates share most positions) as at twenty."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
import torch

from scoring.data import Dataset, assigned_pages, batches
from scoring.decoder import Expected
from scoring.encoder import compress_to_sparse
from scoring.model import ModelConfig, build_model
from scoring.recycling import Earlier, EarlierRows, find_recycled
from scoring.similarity import Block, sampled
from scoring.train import InnerConfig, train_inner
from scoring.types import SparseParam
from scoring.uniqueness import CopyTier, UniquenessConfig

Update = dict[str, SparseParam]
Dense = dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    from tests.loss_score_fixtures import corpus_dataset

    torch.set_num_threads(1)
    return corpus_dataset(tmp_path_factory.mktemp("corpus"))


_RUNS: dict[tuple[int, int, int], tuple[Dataset, tuple[list[Update], list[Update], Dense]]] = {}


def two_windows(ds: Dataset, steps: int, peers: int) -> tuple[list[Update], list[Update], Dense]:
    """Each honest peer's update of window 1 and of window 2, and window 1's dense mean update (run
    once per dataset and sizing: no test changes them; the dataset is kept, so its id is not reused)."""
    key = (id(ds), steps, peers)
    if key not in _RUNS:
        _RUNS[key] = ds, _two_windows(ds, steps, peers)
    first, second, mean = _RUNS[key][1]
    return list(first), list(second), dict(mean)  # copies: no test can change the cached run


def _two_windows(ds: Dataset, steps: int, peers: int) -> tuple[list[Update], list[Update], Dense]:
    model = build_model(ModelConfig.tiny(), seed=0)
    feedback: list[Dense] = [{} for _ in range(peers)]
    windows: list[list[Update]] = []
    mean: Dense = {}
    for window in (1, 2):
        sent = []
        for uid in range(peers):
            pages = assigned_pages(window, uid + 1, public_seed="recycling", n_pages=8, dataset=ds)
            delta = train_inner(model, batches(ds, pages, 8), InnerConfig(steps=steps, lr=2e-3))
            sent.append(compress_to_sparse(delta, feedback[uid]))
        windows.append(sent)
        if window == 1:
            mean = {n: sum(u[n].dense() for u in sent) / peers for n in sent[0]}  # type: ignore[misc]
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p -= mean[n]
    return windows[0], windows[1], mean


def perturbed(update: Update, seed: int) -> Update:
    """The same positions, 1 % of the values changed (the digest differs)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for n, p in update.items():
        flip = torch.rand(p.values.shape, generator=gen) < 0.01
        out[n] = SparseParam(p.shape, p.indices, torch.where(flip, -p.values, p.values))
    return out


def noisy(update: Update, seed: int) -> Update:
    gen = torch.Generator().manual_seed(seed)
    dense = {}
    for n, p in update.items():
        rms = p.values.norm() / max(p.values.numel(), 1) ** 0.5
        dense[n] = p.dense() + torch.randn(p.shape, generator=gen) * 0.5 * rms
    return compress_to_sparse(dense, None)


def sampled_earlier(updates: Sequence[tuple[str, int, Update]]) -> EarlierRows:
    """`EarlierRows` for updates in memory: the rows production's loader reads from the archive."""

    def rows(blocks: Sequence[Block]) -> list[Earlier]:
        out = []
        for hotkey, window, update in updates:
            idx, val = sampled([update], blocks)
            out.append(Earlier(hotkey, window, idx[0], val[0]))
        return out

    return rows


def earlier(updates: list[Update]) -> EarlierRows:
    return sampled_earlier([(f"p{i}", 1, u) for i, u in enumerate(updates)])


def current(updates: list[Update]) -> list[tuple[str, Update]]:
    return [(f"p{i}", u) for i, u in enumerate(updates)]


@pytest.mark.parametrize("steps", [1, 20])
def test_honest_updates_of_consecutive_windows_are_never_recycled(dataset: Dataset, steps: int) -> None:
    first, second, _ = two_windows(dataset, steps, peers=5)
    for seed in range(3):
        assert find_recycled(current(second), earlier(first), seed=seed) == {}


def test_last_windows_updates_under_a_new_digest_are_caught(dataset: Dataset) -> None:
    first, second, mean = two_windows(dataset, 20, peers=5)
    thieves = [
        ("stale", perturbed(first[2], 1)),  # another peer's last update, a few values changed
        ("free_rider", compress_to_sparse({n: t.clone() for n, t in mean.items()}, None)),
        ("noisy_stale", noisy(first[3], 2)),  # re-sparsified: positions shared far less
        ("self_replay", perturbed(first[4], 3)),
    ]
    for seed in range(3):
        found = find_recycled(current(second) + thieves, earlier(first), seed=seed)
        assert set(found) == {"stale", "free_rider", "noisy_stale", "self_replay"}, found
        assert (found["stale"].source, found["stale"].window) == ("p2", 1)
        assert found["stale"].tier is CopyTier.BAN and found["stale"].overlap > 0.95
        assert found["noisy_stale"].source == "p3" and found["noisy_stale"].overlap < 0.5
        assert found["self_replay"].source == "p4"
        assert found["free_rider"].tier >= CopyTier.HALVE


@pytest.mark.parametrize("crowd", [8, 16])
def test_a_crowd_of_one_update_frames_no_honest_peer_and_hides_no_recycler(
    dataset: Dataset, crowd: int
) -> None:
    """Identical updates count once in the consensus the residuals are read against: `crowd` copies of
    one honest update of this window pulled every other residual their way. Here that lifts the
    honest updates' similarity to last window's from about −0.1 to +0.07 … +0.09, under the default
    floor (0.1); in bench_fidelity's copy_crowd (four honest peers, the 2.0275 variant) an honest
    update read 0.15 against an honest one of the window before and was rejected as recycled. At a
    floor and first tier of 0.05 the crowd's pull alone rejects honest peers on the code before.
    Every sender of a recycled update is named, however many send it."""
    first, second, _ = two_windows(dataset, 20, peers=5)
    strict = replace(UniquenessConfig(), similarity_floor=0.05, halve_at=0.05, candidate_margin=0.04)
    copies = [(f"copy{i}", second[0]) for i in range(crowd)]
    stale = perturbed(first[2], 1)
    recyclers = [("stale_a", stale), ("stale_b", stale)]  # one recycled update, sent twice
    for seed in range(3):
        assert find_recycled(current(second), earlier(first), strict, seed=seed) == {}
        assert find_recycled(current(second) + copies, earlier(first), strict, seed=seed) == {}
        found = find_recycled(current(second) + copies + recyclers, earlier(first), seed=seed)
        assert set(found) == {"stale_a", "stale_b"}, found
        assert found["stale_a"] == replace(found["stale_b"], offender="stale_a")


def test_nothing_to_compare_finds_nothing(dataset: Dataset) -> None:
    first, second, _ = two_windows(dataset, 2, peers=2)
    assert find_recycled(current(second), sampled_earlier([]), seed=0) == {}
    assert find_recycled([], earlier(first), seed=0) == {}
    assert find_recycled(current(second[:1]), earlier(first[:1]), seed=0) == {}  # too few to calibrate


class _Archive:
    def __init__(self, blobs: dict[str, bytes]) -> None:
        self.blobs = blobs

    def get(self, key: str) -> bytes:
        return self.blobs[key]  # KeyError when pruned, as the real archive


class _Ledger:
    """What `earlier_loader` reads: the aggregated submissions' keys, and the archive."""

    def __init__(self, rows: list[tuple[int, str, str]], blobs: dict[str, bytes]) -> None:
        self.rows, self.archive = rows, _Archive(blobs)
        self.asked: list[tuple[int, int]] = []
        self.scratch = None  # the system's temporary folder

    def aggregated_archived(self, window: int, windows: int) -> list[tuple[int, str, str]]:
        self.asked.append((window, windows))
        return self.rows


def test_the_loader_reads_aggregated_submissions_back_and_skips_pruned_ones() -> None:
    """Each archived submission is reduced to its rows in the blocks asked (the same rows as its
    update sampled in memory); a pruned one is skipped; turned off, nothing is read."""
    import numpy as np

    from scoring.decoder import decode_submission
    from scoring.similarity import sample_blocks, sampled
    from scoring.uniqueness import UniquenessConfig
    from tests.codec_fixtures import SPEC, make_file  # a valid signed submission of a small spec
    from validator.round.check_config import CheckConfig
    from validator.round.recycling import earlier_loader

    data = make_file(0)
    decoded = decode_submission(data, SPEC, Expected(verify_signature=False)).update
    assert decoded is not None
    blocks = sample_blocks(decoded.params, UniquenessConfig(sample_blocks=8), np.random.default_rng(0))
    ledger = _Ledger([(4, "a", "kept"), (5, "b", "pruned")], {"kept": data})
    rows = earlier_loader(ledger, 6, SPEC, CheckConfig())(blocks)  # type: ignore[arg-type]
    assert ledger.asked == [(6, 2)]
    assert [(e.hotkey, e.window) for e in rows] == [("a", 4)]
    idx, val = sampled([decoded.params], blocks)
    assert np.array_equal(rows[0].idx, idx[0]) and np.array_equal(rows[0].val, val[0])
    off = earlier_loader(ledger, 6, SPEC, CheckConfig(recycled_windows=0))  # type: ignore[arg-type]
    assert off(blocks) == [] and ledger.asked == [(6, 2)]
