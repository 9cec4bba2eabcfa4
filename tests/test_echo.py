"""Echoes of the window's consensus (scoring/echo.py), on real updates of the tiny model.

A peer that proved its training can stop, average the others' published updates and send the
mean as its own: the copy check compares what is left beyond the consensus, and an echo of the
consensus leaves nothing, so it was aggregated and paid (an audit: 13 % of the weights, windows 4-5).
"""

from __future__ import annotations

import math

import pytest
import torch

from scoring.copy_config import UniquenessConfig
from scoring.data import Dataset
from scoring.echo import find_echoes, groups_of
from scoring.encoder import compress_to_sparse
from scoring.ranking import Status
from scoring.types import Reason, SparseUpdate, SubmissionMeta
from tests.test_copy_calibration import Update, honest_updates
from validator.round.check_config import CheckConfig
from validator.round.checking import Standing, check_window, reject_echoes
from validator.round.outcomes import PeerTarget, PeerWindow
from validator.round.window import WindowSeed
from validator.stores.fetch_types import FetchResult

CFG = UniquenessConfig()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    from tests.loss_score_fixtures import corpus_dataset

    torch.set_num_threads(1)
    return corpus_dataset(tmp_path_factory.mktemp("corpus"))


def mean_of(updates: list[Update]) -> Update:
    return compress_to_sparse(
        {n: torch.stack([u[n].dense() for u in updates]).mean(0) for n in updates[0]}, None
    )


@pytest.mark.parametrize("steps", [1, 20])
def test_the_mean_of_the_others_is_an_echo_and_no_honest_peer_is(dataset: Dataset, steps: int) -> None:
    honest = honest_updates(dataset, steps=steps, peers=5)
    updates = {f"h{i}": u for i, u in enumerate(honest)} | {"echo": mean_of(honest)}
    for seed in range(4):
        found = find_echoes(updates, proven=set(updates), cfg=CFG, ratio=0.5, seed=seed)
        assert set(found) == {"echo"}, found
        assert found["echo"].share < 0.5 * found["echo"].reference
    alone = {k: u for k, u in updates.items() if k != "echo"}
    assert find_echoes(alone, proven=set(alone), cfg=CFG, ratio=0.5, seed=0) == {}


def test_identities_that_never_proved_training_cannot_move_the_reference(dataset: Dataset) -> None:
    """Unproven sybils sending updates far from the consensus (their own share ≈ 1) would lift a
    median over everyone until honest peers read as echoes; the reference is the proven peers'."""
    honest = honest_updates(dataset, steps=1, peers=4)
    gen = torch.Generator().manual_seed(7)
    noise = [
        compress_to_sparse({n: torch.randn(p.shape, generator=gen) for n, p in honest[0].items()}, None)
        for _ in range(8)
    ]
    updates = {f"h{i}": u for i, u in enumerate(honest)} | {f"s{i}": u for i, u in enumerate(noise)}
    proven = {f"h{i}" for i in range(4)}
    assert find_echoes(updates, proven=proven, cfg=CFG, ratio=0.5, seed=0) == {}
    assert set(find_echoes(updates, proven=set(updates), cfg=CFG, ratio=0.5, seed=0)) >= proven  # framed


def test_too_few_peers_or_proven_ones_decide_nothing(dataset: Dataset) -> None:
    honest = honest_updates(dataset, steps=20, peers=3)
    updates = {f"h{i}": u for i, u in enumerate(honest)} | {"echo": mean_of(honest)}
    assert find_echoes(updates, proven={"h0", "h1"}, cfg=CFG, ratio=0.5, seed=0) == {}  # 2 proven
    three = {k: updates[k] for k in ("h0", "h1", "echo")}
    assert find_echoes(three, proven=set(three), cfg=CFG, ratio=0.5, seed=0) == {}  # 3 updates
    assert find_echoes(updates, proven=set(updates), cfg=CFG, ratio=0.0, seed=0) == {}  # off


def _window_peer(hotkey: str, update: Update, digest: str, seen: float, resolution: float) -> PeerWindow:
    meta = SubmissionMeta(window=1, uid=0, hotkey=hotkey, base="0" * 64, signature="")
    fetch = FetchResult(hotkey, Status.OK, first_seen=seen, seen_resolution_s=resolution)
    return PeerWindow(
        PeerTarget(0, hotkey, None), Status.OK, fetch=fetch, update=SparseUpdate(meta, digest, update)
    )


def _checked(peers: list[PeerWindow], proven: set[str]) -> dict[str, PeerWindow]:
    """The check stage's copy and echo checks, in the round's order (validator/round/pipeline.py)."""
    cfg, seed = CheckConfig(), WindowSeed("ab" * 32)
    checked, copies = check_window(
        peers, lambda *a: None, cfg, lambda d: set(), seed, Standing(proven=proven)
    )
    checked = reject_echoes(checked, cfg, seed=seed.number + 2, proven=proven, copies=copies)
    return {p.hotkey: p for p in checked}


@pytest.mark.parametrize("copies", [1, 2, 3])
def test_resent_copies_do_not_make_their_source_an_echo(dataset: Dataset, copies: int) -> None:
    """An audit's attack: identities re-send a proven peer's bytes from stores the polls never see,
    so no upload order is clear and nobody is penalised for the copies; counted apart, they were
    most of the victim's consensus of the others (own share 0.15 against a median of 0.97 with
    two) and it was rejected as an echo. A copy group speaks with one voice."""
    honest = honest_updates(dataset, steps=20, peers=4)
    proven = {f"h{i}" for i in range(4)}
    peers = [_window_peer(f"h{i}", u, f"{i:064x}", 100.0 + i, 2.0) for i, u in enumerate(honest)]
    peers += [_window_peer(f"s{j}", honest[0], f"{0:064x}", 140.0, math.inf) for j in range(copies)]
    by = _checked(peers, proven)
    assert all(by[h].valid for h in proven), {h: by[h].detail for h in proven}
    # the echo itself is still one, copies or not
    echo = _window_peer("echo", mean_of(honest), "e" * 64, 101.0, 2.0)
    by = _checked([*peers, echo], proven)
    assert by["echo"].reason == Reason.ECHO
    assert all(by[h].valid for h in proven)


def test_copy_groups() -> None:
    keys = ["a", "b", "c", "d", "e"]
    assert groups_of(keys, []) == [0, 1, 2, 3, 4]
    assert groups_of(keys, [("c", "a"), ("e", "c"), ("b", "x")]) == [0, 1, 0, 2, 0]
    assert groups_of(keys, [("d", "b"), ("b", "d")]) == [0, 1, 2, 1, 3]
