"""Statistics of the benchmark harness: summaries, gains, the median interval, the noise verdict."""

from __future__ import annotations

import math

import pytest

from megamoe.bench.stats import (
    FASTER,
    NOISE,
    SLOWER,
    gain,
    judge,
    median_ci,
    median_ci_ranks,
    median_gain,
    noise_floor,
    pair_gains,
    summarize,
)


def test_summary_is_median_min_max_count() -> None:
    s = summarize([5.0, 1.0, 3.0, 9.0])
    assert (s.median, s.min, s.max, s.n) == (4.0, 1.0, 9.0, 4)
    assert summarize([2.0, 7.0, 3.0]).median == 3.0


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, -2.0], [float("nan")], [float("inf")]])
def test_summary_rejects_empty_or_nonpositive_or_nonfinite_samples(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="samples"):
        summarize(bad)


def test_gain_is_baseline_over_candidate_minus_one() -> None:
    # seed 001's first row: 163.757 us baseline, 156.064 us fused -> +4.929 %
    assert gain(163.757, 156.064) == pytest.approx(0.04929, abs=5e-6)
    assert gain(1.0, 2.0) == -0.5
    assert median_gain([1.0, 3.0, 2.0], [1.0, 1.0, 1.0]) == 1.0


def test_pair_gains_pair_sample_i_of_each_arm() -> None:
    assert pair_gains([2.0, 3.0], [1.0, 3.0]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="equal sample counts"):
        pair_gains([1.0], [1.0, 2.0])


@pytest.mark.parametrize(
    ("n", "ranks"),
    # Standard tables of the distribution-free 95 % interval for a median.
    [(6, (1, 6)), (10, (2, 9)), (20, (6, 15)), (60, (22, 39))],
)
def test_median_interval_ranks_match_the_binomial_tables(n: int, ranks: tuple[int, int]) -> None:
    assert median_ci_ranks(n, 0.95) == ranks


def test_median_interval_has_its_stated_coverage() -> None:
    # Independent check: coverage computed from the binomial law must be >= the level,
    # and one rank narrower must fall below it.
    for n in (8, 20, 47, 60):
        k, _ = median_ci_ranks(n, 0.95)
        below = sum(math.comb(n, j) for j in range(k)) / 2**n
        assert 1 - 2 * below >= 0.95
        tighter = sum(math.comb(n, j) for j in range(k + 1)) / 2**n
        assert 1 - 2 * tighter < 0.95


def test_median_interval_of_too_few_values_is_the_full_range() -> None:
    assert median_ci([3.0, 1.0, 2.0], 0.95) == (1.0, 3.0)


def test_verdict_is_faster_when_interval_rounds_and_floor_all_agree() -> None:
    v = judge(0.05, [0.04, 0.05, 0.06], (0.03, 0.07), floor=0.01)
    assert v.label == FASTER and v.reasons == ()
    assert judge(-0.05, [-0.04, -0.05, -0.06], (-0.07, -0.03), floor=0.01).label == SLOWER


def test_verdict_is_noise_when_gain_is_below_the_aa_floor() -> None:
    v = judge(0.002, [0.002, 0.0021, 0.0019], (0.001, 0.003), floor=0.0024)
    assert v.label == NOISE
    assert any("floor" in r for r in v.reasons)


def test_verdict_is_noise_when_round_gains_disagree_in_sign() -> None:
    v = judge(0.05, [0.04, -0.01, 0.06], (0.03, 0.07), floor=None)
    assert v.label == NOISE
    assert any("sign" in r for r in v.reasons)


def test_verdict_is_noise_when_the_pair_interval_contains_zero() -> None:
    v = judge(0.05, [0.04, 0.05, 0.06], (-0.01, 0.07), floor=None)
    assert v.label == NOISE
    assert any("contains 0" in r for r in v.reasons)


def test_zero_gain_is_noise() -> None:
    assert judge(0.0, [0.0, 0.0, 0.0], (0.0, 0.0), floor=None).label == NOISE


def test_noise_floor_is_the_largest_apparent_control_gain() -> None:
    # seed 001's A/A control: round gains from -0.031 % to +0.238 %
    assert noise_floor(0.0012, [-0.00031, 0.00238, 0.001]) == 0.00238
    assert noise_floor(-0.004, [0.001, -0.002, 0.003]) == 0.004


def test_planted_bug_a_verdict_ignoring_the_floor_is_caught() -> None:
    # A judge that forgets the floor would call a below-floor difference real.
    def broken_judge(g, rounds, ci, floor):  # type: ignore[no-untyped-def]
        return judge(g, rounds, ci, None)

    args = (0.002, [0.002, 0.0021, 0.0019], (0.001, 0.003), 0.0024)
    assert broken_judge(*args).label != NOISE
    assert judge(*args).label == NOISE
