"""The proof of training's page test (scoring/page_test.py): Student's pooled t per window, folded into a
discounted Stouffer sum that reads N(0, 1) when a peer's own pages gain no more than held-out ones."""

from __future__ import annotations

import math
import random

import pytest
from scipy.stats import ttest_ind

from scoring.page_test import PageLosses, PageTestConfig, fold, page_t, stouffer

CFG = PageTestConfig()


def losses(own_after: list[float], heldout_after: list[float]) -> PageLosses:
    return PageLosses(
        (1.0,) * len(own_after), tuple(own_after), (1.0,) * len(heldout_after), tuple(heldout_after)
    )


def test_t_is_students_of_the_relative_page_gains_with_the_variance_pooled() -> None:
    # own gains 0.1, 0.3 (mean 0.2, variance 0.02); held-out 0.0, 0.2 (mean 0.1, variance 0.02)
    t = page_t(losses([0.9, 0.7], [1.0, 0.8]))
    assert t is not None and t == pytest.approx(0.1 / math.sqrt(0.02 / 2 + 0.02 / 2), rel=1e-12)
    # unequal sides: own 0.1, 0.3 (variance 0.02, 1 df); held-out 0, 0.1, 0.2 (variance 0.01, 2 df):
    # pooled (0.02 + 2 · 0.01) / 3 = 0.04 / 3, times 1/2 + 1/3
    unequal = page_t(losses([0.9, 0.7], [1.0, 0.9, 0.8]))
    assert unequal == pytest.approx(0.1 / math.sqrt(0.04 / 3 * (1 / 2 + 1 / 3)), rel=1e-12)
    # each side relative to its own mean loss before: doubling the held-out losses changes nothing
    doubled = PageLosses((1.0, 1.0), (0.9, 0.7), (2.0, 2.0), (2.0, 1.6))
    assert page_t(doubled) == pytest.approx(t, rel=1e-12)
    assert page_t(losses([1.0, 0.8], [0.9, 0.7])) == pytest.approx(-t, rel=1e-12)


def test_a_peer_that_trains_on_some_of_its_pages_is_not_held_under_the_proof_by_their_spread() -> None:
    """Two of eight own pages trained on: Welch's t divides by the own side's spread, which those two
    pages make, and stays under 1.5 however much they gain; pooled, the held-out side's 15 degrees of
    freedom weigh in too and t passes 2 (the ¼-pages peer lost its proof under Welch's,
    README, Scoring fidelity, fifteenth round). SciPy's t-tests are the reference for both."""
    held = [1.0 - 0.01 * (i % 4) for i in range(16)]  # held-out gains 0 … 0.03
    ts, welch = [], []
    for gain in (0.05, 0.1, 0.4):
        own = [1.0 - gain, 1.0 - gain] + [1.0 - 0.01 * (i % 4) for i in range(6)]
        t = page_t(losses(own, held))
        gains_own, gains_held = [1.0 - a for a in own], [1.0 - a for a in held]
        assert t == pytest.approx(float(ttest_ind(gains_own, gains_held).statistic), rel=1e-9)
        welch.append(float(ttest_ind(gains_own, gains_held, equal_var=False).statistic))
        assert t is not None and t > welch[-1]
        ts.append(t)
    assert ts[0] < ts[1] < ts[2] and ts[2] > 2.0 > 1.5 > max(welch)


def test_t_is_calibrated_when_own_pages_are_drawn_like_held_out_ones() -> None:
    """Under no own-page effect both sides come from one distribution: t is Student's with
    8 + 16 − 2 degrees of freedom, so the proof's per-window evidence is calibrated."""
    rng = random.Random(11)
    ts = []
    for _ in range(4000):
        own = [1.0 - rng.gauss(0.01, 0.004) for _ in range(8)]
        held = [1.0 - rng.gauss(0.01, 0.004) for _ in range(16)]
        t = page_t(losses(own, held))
        assert t is not None
        ts.append(t)
    mean = sum(ts) / len(ts)
    var = sum((t - mean) ** 2 for t in ts) / len(ts)
    assert abs(mean) < 0.05 and 0.98 < var < 1.2  # Student's t22: variance 22/20 = 1.1
    assert 0.015 < sum(t > 2.0 for t in ts) / len(ts) < 0.045  # P(t22 > 2) = 0.029


@pytest.mark.parametrize(
    "pages",
    [
        losses([0.9], [1.0, 0.8]),  # one own page: no spread to read
        PageLosses((1.0, 1.0), (0.9, 0.8), (1.0, 1.0), (0.9, 0.8, 0.7)),  # a page without its loss before
        losses([0.9, math.nan], [1.0, 0.8]),
        losses([0.9, 0.9], [0.8, 0.8]),  # no spread at all
        PageLosses((0.0, 0.0), (0.0, 0.0), (1.0, 1.0), (0.9, 0.8)),  # no loss before to be relative to
    ],
)
def test_t_is_undefined_without_two_finite_pages_a_side_and_some_spread(pages: PageLosses) -> None:
    assert page_t(pages) is None


def test_the_discounted_sum_reads_standard_normal_when_own_pages_gain_nothing_more() -> None:
    """Under no own-page effect (t ~ N(0, 1) every window) the statistic is N(0, 1) after any number
    of windows: it would not be with the plain weight count in place of the discounted variance."""
    rng = random.Random(7)
    for windows in (1, 3, 12, 40):
        zs = []
        for _ in range(4000):
            total = weight = 0.0
            for _ in range(windows):
                total, weight = fold(total, weight, rng.gauss(0.0, 1.0), CFG)
            z = stouffer(total, weight)
            assert z is not None
            zs.append(z)
        mean = sum(zs) / len(zs)
        var = sum((z - mean) ** 2 for z in zs) / len(zs)
        assert abs(mean) < 0.06 and 0.9 < var < 1.08, (windows, mean, var)  # clipping at ±3 trims a little
        assert 0.05 < sum(z >= CFG.z for z in zs) / len(zs) < 0.085  # 1 − Φ(1.5) = 0.067


def test_one_strong_window_does_not_carry_a_proof_for_long() -> None:
    total, weight = fold(0.0, 0.0, 40.0, CFG)  # clipped to 3
    assert stouffer(total, weight) == 3.0
    windows = 0
    while (z := stouffer(total, weight)) is not None and z >= CFG.z:
        total, weight = fold(total, weight, 0.0, CFG)
        windows += 1
    assert windows <= 4


def test_a_peer_that_stops_training_on_its_own_pages_loses_the_proof_in_bounded_time() -> None:
    total = weight = 0.0
    for _ in range(30):  # a long honest record, every window at the clip
        total, weight = fold(total, weight, 5.0, CFG)
    lazy = 0
    while (z := stouffer(total, weight)) is not None and z >= CFG.z:
        total, weight = fold(total, weight, 0.0, CFG)
        lazy += 1
    # at the clip the statistic settles near 3·sqrt((1 + decay) / (1 − decay)) = 18.7, which decays
    # under 1.5 in 45 windows; an undiscounted sum (decay 1) of 30 such windows would last ~3,600
    assert lazy == 45


def test_no_window_no_statistic() -> None:
    assert stouffer(0.0, 0.0) is None


@pytest.mark.parametrize("bad", [{"clip": 0.0}, {"decay": 0.0}, {"decay": 1.5}])
def test_the_config_refuses_values_that_break_the_test(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PageTestConfig(**bad)
