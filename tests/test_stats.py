"""Paired statistics against scipy and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from contractrl.analysis.stats import mcnemar_exact, paired_bootstrap, sign_test

scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize(
    ("only_a", "only_b", "both", "neither"), [(3, 9, 40, 8), (0, 5, 10, 1), (7, 7, 2, 2), (0, 0, 4, 4), (1, 12, 0, 0)]
)
def test_mcnemar_matches_scipy_binomtest(only_a: int, only_b: int, both: int, neither: int) -> None:
    a = [True] * only_a + [False] * only_b + [True] * both + [False] * neither
    b = [False] * only_a + [True] * only_b + [True] * both + [False] * neither
    n = only_a + only_b
    expected = 1.0 if n == 0 else scipy_stats.binomtest(min(only_a, only_b), n, 0.5).pvalue
    assert mcnemar_exact(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(("positive", "negative"), [(9, 3), (5, 0), (7, 7), (0, 0), (1, 12), (30, 14)])
def test_sign_test_matches_scipy_binomtest(positive: int, negative: int) -> None:
    n = positive + negative
    expected = 1.0 if n == 0 else scipy_stats.binomtest(positive, n, 0.5).pvalue
    assert sign_test(positive, negative) == pytest.approx(expected)
    assert sign_test(negative, positive) == sign_test(positive, negative)
    with pytest.raises(ValueError, match="cannot be negative"):
        sign_test(-1, positive)


def test_paired_bootstrap_is_centred_on_the_mean_difference_and_covers_it() -> None:
    rng = np.random.default_rng(1)
    a = rng.random(200) < 0.5
    b = a | (rng.random(200) < 0.2)  # b wins on about 10% of cases
    result = paired_bootstrap(a.astype(float).tolist(), b.astype(float).tolist(), seed=3)
    assert result.difference == pytest.approx(float(b.mean() - a.mean()))
    assert result.low < result.difference < result.high
    assert result.low > 0  # a clear improvement excludes zero
    # the percentile interval agrees with scipy's bootstrap of the paired differences
    diff = b.astype(float) - a.astype(float)
    ref = scipy_stats.bootstrap((diff,), np.mean, n_resamples=10_000, method="percentile", random_state=3).confidence_interval
    assert result.low == pytest.approx(ref.low, abs=0.01)
    assert result.high == pytest.approx(ref.high, abs=0.01)
    assert paired_bootstrap([1.0, 0.0], [1.0, 0.0]).difference == 0.0


def test_paired_inputs_must_pair() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="empty"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="equal lengths"):
        mcnemar_exact([True], [])


def test_effect_size_and_seed_spread_by_hand() -> None:
    from contractrl.analysis.stats import effect_size, seed_spread

    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 5.0, 5.0]
    diff = np.asarray(b) - np.asarray(a)
    assert effect_size(a, b) == pytest.approx(diff.mean() / diff.std(ddof=1))
    assert np.isnan(effect_size([1.0, 2.0], [2.0, 3.0]))  # constant differences: undefined
    assert seed_spread({0: 0.5, 1: 0.7, 2: 0.9}) == pytest.approx(0.2)
    assert np.isnan(seed_spread({0: 0.5}))


def test_seed_level_bootstrap_carries_seed_variation() -> None:
    rng = np.random.default_rng(4)
    seeds = np.repeat(np.arange(4), 50)
    shift = np.array([0.0, 0.4, -0.3, 0.5])[seeds]  # seeds disagree strongly about the effect
    a = rng.normal(0.0, 0.1, 200)
    b = a + 0.15 + shift + rng.normal(0.0, 0.05, 200)
    flat = paired_bootstrap(a.tolist(), b.tolist(), resamples=2000, seed=1)
    nested = paired_bootstrap(a.tolist(), b.tolist(), clusters=seeds.tolist(), resamples=2000, seed=1)
    assert nested.difference == pytest.approx(flat.difference)
    assert (nested.high - nested.low) > 3 * (flat.high - flat.low)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap([1.0, 2.0], [1.0, 2.0], clusters=[0])
