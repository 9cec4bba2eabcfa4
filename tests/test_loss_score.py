"""LossScore: the formulas, exact sparse apply/restore, determinism, and the statistical signal."""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from scoring.loss_score import (
    LossScoreConfig,
    PeerJob,
    apply_sparse,
    evaluate_peers,
    mean_loss,
    paged_loss,
    restore,
    retention,
    score_losses,
)
from scoring.model import LlamaModel, build_model
from scoring.train import InnerConfig, train_inner
from scoring.types import SparseParam
from tests.loss_score_fixtures import (
    SMALL,
    Outcomes,
    determinism_losses,
    random_update,
    simulate,
    token_batches,
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def checksum(model: LlamaModel) -> str:
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_score_formulas_with_literal_values() -> None:
    score, own_gain, indicator = score_losses(own_before=4.0, own_after=3.0, rand_before=5.0, rand_after=4.5)
    assert (score, own_gain, indicator) == (0.1, 0.25, 1)
    assert score_losses(4.0, 3.9, 5.0, 4.5)[2] == -1  # own gain 0.025 < score 0.1
    assert score_losses(4.0, 4.0, 5.0, 5.0)[2] == -1  # no gain anywhere is not proof of training
    assert LossScoreConfig().beta == pytest.approx(0.08)
    with pytest.raises(ValueError):
        LossScoreConfig(eval_lr_factor=0.0)


def test_apply_writes_only_kept_coordinates_and_restores_exactly() -> None:
    model = build_model(SMALL, seed=0)
    norm = model.model.norm.weight
    before = norm.detach().clone()
    update = {"model.norm.weight": SparseParam((32,), torch.tensor([0, 5]), torch.tensor([1.0, 2.0]))}
    saved = apply_sparse(model, update, {"model.norm.weight": 0.5}, beta=0.5)
    expected = before.clone()
    expected[0] -= 0.25  # β·factor·v = 0.5·0.5·1
    expected[5] -= 0.5
    assert torch.equal(norm.detach(), expected)
    restore(saved)
    assert torch.equal(norm.detach(), before)
    with pytest.raises(KeyError):
        apply_sparse(model, {"nope": update["model.norm.weight"]}, {}, beta=1.0)


def test_a_bad_parameter_midway_leaves_the_model_unchanged() -> None:
    model = build_model(SMALL, seed=0)
    digest = checksum(model)
    update = random_update(model, 1)
    last = list(update)[-1]
    update[last] = SparseParam(update[last].shape, torch.tensor([10**9]), torch.tensor([1.0]))
    with pytest.raises(IndexError):
        apply_sparse(model, update, {}, beta=1.0)
    assert checksum(model) == digest


def test_model_is_bit_identical_after_many_peers() -> None:
    model = build_model(SMALL, seed=1)
    digest = checksum(model)
    own, held = token_batches(1), token_batches(2)
    loads: list[int] = []

    def loader(uid: int) -> list[torch.Tensor]:
        loads.append(uid)
        return own

    jobs = [PeerJob(uid, random_update(model, uid), partial(loader, uid)) for uid in range(6)]
    results = evaluate_peers(model, jobs, held, reference={}, cfg=LossScoreConfig(1.0, 1.0))
    assert checksum(model) == digest
    assert sorted(loads) == list(range(6))  # each peer's data loaded exactly once
    assert [r.uid for r in results] == list(range(6))
    assert len({r.loss_rand_before for r in results}) == 1  # shared held-out loss_before
    assert all(r.loss_own_after != r.loss_own_before for r in results)  # the updates did take effect
    assert results[0].loss_own_before == pytest.approx(mean_loss(model, own), rel=0, abs=0)
    # per page, from the same passes: every peer shares the held-out pages' losses before
    held_pages = paged_loss(model, held).pages
    for r in results:
        assert r.pages is not None and r.pages.heldout_before == held_pages
        assert len(r.pages.own_before) == len(r.pages.own_after) == sum(len(b) for b in own)
        assert statistics.fmean(r.pages.heldout_after) == pytest.approx(r.loss_rand_after, rel=1e-6)
        assert statistics.fmean(r.pages.own_after) == pytest.approx(r.loss_own_after, rel=1e-6)
    assert all(r.timings.forward_s > 0 and r.timings.total_s >= r.timings.forward_s for r in results)


def test_page_losses_come_from_the_pass_that_measures_the_mean() -> None:
    model = build_model(SMALL, seed=4)
    data = token_batches(8)  # two batches of four pages
    paged = paged_loss(model, data)
    with torch.inference_mode():  # the mean is the cross-entropy sum measured before pages, to the bit
        total = sum(
            float(
                F.cross_entropy(model(b[:, :-1]).float().flatten(0, 1), b[:, 1:].flatten(), reduction="sum")
            )
            for b in data
        )
    assert paged.mean == total / sum(b[:, 1:].numel() for b in data) == mean_loss(model, data)
    assert len(paged.pages) == 8 and statistics.fmean(paged.pages) == pytest.approx(paged.mean, rel=1e-6)
    assert paged.pages[5] == pytest.approx(mean_loss(model, [data[1][1:2]]), rel=1e-6)  # that page alone


def test_clipping_to_reference_matches_a_prescaled_update() -> None:
    model = build_model(SMALL, seed=2)
    update = random_update(model, 7)
    reference = {n: p.norm() / 10 for n, p in update.items()}
    prescaled = {n: SparseParam(p.shape, p.indices, p.values / 10) for n, p in update.items()}
    own, held = token_batches(3), token_batches(4)
    cfg = LossScoreConfig(1.0, 1.0)
    clipped = evaluate_peers(model, [PeerJob(0, update, lambda: own)], held, reference=reference, cfg=cfg)[0]
    manual = evaluate_peers(model, [PeerJob(0, prescaled, lambda: own)], held, reference={}, cfg=cfg)[0]
    unclipped = evaluate_peers(model, [PeerJob(0, update, lambda: own)], held, reference={}, cfg=cfg)[0]
    assert clipped.loss_rand_after == pytest.approx(manual.loss_rand_after, abs=1e-6)
    assert abs(unclipped.loss_rand_after - manual.loss_rand_after) > 1e-3


DETERMINISM_SCRIPT = """
import torch
torch.set_num_threads(2)
from tests.loss_score_fixtures import determinism_losses
print(determinism_losses())
"""


def test_losses_are_bit_identical_in_another_process() -> None:
    root = Path(__file__).resolve().parent.parent
    other = subprocess.run(
        [sys.executable, "-c", DETERMINISM_SCRIPT], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    here = determinism_losses()  # one thread here, two there
    assert other == here + "\n"
    assert here.count("(") == 2


def test_train_inner_leaves_model_untouched_and_delta_points_downhill() -> None:
    model = build_model(SMALL, seed=4)
    digest = checksum(model)
    data = token_batches(7, n=1)
    delta = train_inner(model, data, InnerConfig(steps=5, lr=1e-2))
    assert checksum(model) == digest
    assert set(delta) == {n for n, _ in model.named_parameters()}
    before = mean_loss(model, data)
    sparse = {n: SparseParam(tuple(d.shape), torch.arange(d.numel()), d.flatten()) for n, d in delta.items()}
    saved = apply_sparse(model, sparse, {}, beta=1.0)  # θ − Δ = the trained model
    assert mean_loss(model, data) < before - 0.05
    restore(saved)
    assert checksum(model) == digest


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    from tests.loss_score_fixtures import corpus_dataset

    torch.set_num_threads(1)
    ds = corpus_dataset(tmp_path_factory.mktemp("corpus"))
    return simulate(ds, base_seed=0, seeds=2, windows=6)


def test_honest_peers_prove_training_and_lazy_peers_do_not(outcomes: Outcomes) -> None:
    honest, lazy = outcomes.rate(outcomes.honest), outcomes.rate(outcomes.lazy)
    assert len(outcomes.honest) == 12 and len(outcomes.lazy) == 96
    assert honest >= 0.85
    assert honest - lazy >= 0.3
    # A lazy peer's held-out score is as good as an honest one's: only the indicator separates them.
    assert statistics.mean(e.score for e in outcomes.lazy) > 0


def test_noise_scores_near_zero_far_below_honest(outcomes: Outcomes) -> None:
    honest = statistics.mean(e.score for e in outcomes.honest)
    noise = [e.score for e in outcomes.noise]
    assert honest > 1e-3
    assert abs(statistics.mean(noise)) < 0.1 * honest
    assert all(n.score < h.score for n, h in zip(outcomes.noise, outcomes.honest, strict=True))


def test_scaled_update_gains_nothing_from_its_scale(outcomes: Outcomes) -> None:
    honest = statistics.mean(e.score for e in outcomes.honest)
    big = statistics.mean(e.score for e in outcomes.scaled)
    assert abs(big - honest) < 0.1 * honest


def test_the_probe_loss_is_the_update_applied_at_probe_factor_times_beta() -> None:
    """The fourth pass applies the clipped update at `probe_factor` × β: the same held-out loss as
    evaluating with β that large, and the model is bit-identical after it."""
    model = build_model(SMALL, seed=3)
    digest = checksum(model)
    update = random_update(model, 5)
    own, held = token_batches(5), token_batches(6)
    job = [PeerJob(0, update, lambda: own)]
    probe = evaluate_peers(model, job, held, reference={}, cfg=LossScoreConfig(0.25, 0.8, 4.0))[0]
    at_probe = evaluate_peers(model, job, held, reference={}, cfg=LossScoreConfig(1.0, 0.8))[0]
    assert checksum(model) == digest
    assert probe.loss_rand_step == at_probe.loss_rand_after
    assert probe.loss_rand_step != probe.loss_rand_after
    ratio = retention(probe)
    gain = probe.loss_rand_before - probe.loss_rand_after
    assert ratio == (probe.loss_rand_before - at_probe.loss_rand_after) / gain if gain > 0 else ratio is None
    assert retention(replace(probe, loss_rand_step=None)) is None
