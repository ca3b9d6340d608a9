"""Statistics of retained samples: summaries, gains, a median interval, the noise verdict.

Conventions (seed 001): arm A is the baseline, arm B the candidate; a gain is
``median(A) / median(B) - 1`` (positive: B is faster, as a throughput gain).
The combined gain uses the medians over all rounds; every round also reports
its own gain. Pairs (one A and one B sample taken back to back) give paired
gains ``a_i / b_i - 1`` whose median gets a distribution-free confidence
interval from order statistics.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

NOISE = "noise"
FASTER = "faster"
SLOWER = "slower"
VERDICTS = (NOISE, FASTER, SLOWER)


@dataclass(frozen=True)
class Summary:
    """Median, min, max and count of one list of samples (seconds)."""

    median: float
    min: float
    max: float
    n: int


def _check_samples(argument: str, samples: Sequence[float]) -> None:
    if len(samples) == 0:
        raise ValueError(f"{argument}: expected at least one sample, got none")
    for i, s in enumerate(samples):
        if not (isinstance(s, int | float) and math.isfinite(s) and s > 0):
            raise ValueError(f"{argument}[{i}]: expected a finite time > 0, got {s!r}")


def summarize(samples: Sequence[float]) -> Summary:
    """Median, min and max of ``samples`` (all finite and positive)."""
    _check_samples("samples", samples)
    return Summary(statistics.median(samples), min(samples), max(samples), len(samples))


def gain(baseline: float, candidate: float) -> float:
    """Throughput gain of the candidate over the baseline: ``baseline / candidate - 1``."""
    if not (baseline > 0 and candidate > 0):
        raise ValueError(f"gain: expected positive times, got baseline={baseline}, candidate={candidate}")
    return baseline / candidate - 1.0


def median_gain(a: Sequence[float], b: Sequence[float]) -> float:
    """Gain of the medians: ``median(a) / median(b) - 1``."""
    _check_samples("a", a)
    _check_samples("b", b)
    return gain(statistics.median(a), statistics.median(b))


def pair_gains(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-pair gains ``a[i] / b[i] - 1`` (equal lengths: sample i of each arm is one pair)."""
    if len(a) != len(b):
        raise ValueError(f"pairs: expected equal sample counts, got {len(a)} and {len(b)}")
    _check_samples("a", a)
    _check_samples("b", b)
    return [x / y - 1.0 for x, y in zip(a, b, strict=True)]


def median_ci_ranks(n: int, confidence: float) -> tuple[int, int]:
    """1-based order-statistic ranks ``(k, n + 1 - k)`` bracketing the median.

    ``k`` is the largest rank with ``P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2``,
    so ``[x_(k), x_(n+1-k)]`` covers the true median with probability at least
    ``confidence`` for any continuous distribution. When even ``k = 1`` is not
    enough (too few samples), returns ``(1, n)``: the full range.
    """
    if n < 1:
        raise ValueError(f"n: expected at least one value, got {n}")
    alpha_half = (1.0 - confidence) / 2.0
    k = 0
    cdf = 0.0  # P(X <= k - 1) for the candidate rank k + 1
    for j in range(n + 1):
        cdf += math.comb(n, j) / 2.0**n
        if cdf > alpha_half:
            break
        k = j + 1
    k = max(k, 1)
    return k, n + 1 - k


def median_ci(values: Sequence[float], confidence: float) -> tuple[float, float]:
    """Distribution-free confidence interval for the median of ``values``."""
    xs = sorted(values)
    lo, hi = median_ci_ranks(len(xs), confidence)
    return xs[lo - 1], xs[hi - 1]


@dataclass(frozen=True)
class Verdict:
    """``noise``, ``faster`` or ``slower`` (the candidate B against A), with the reasons for noise."""

    label: str
    reasons: tuple[str, ...]


def judge(
    combined_gain: float,
    round_gains: Sequence[float],
    ci: tuple[float, float],
    floor: float | None,
) -> Verdict:
    """Decide whether a difference is real.

    Noise when any of: the pair-gain interval ``ci`` contains 0; the round
    gains do not all share the sign of the combined gain; ``|combined_gain|``
    is not above ``floor`` (the A/A control's largest apparent gain, or the
    declared resolution when judging the control itself). Otherwise
    ``faster`` (gain > 0) or ``slower``.
    """
    reasons: list[str] = []
    if ci[0] <= 0.0 <= ci[1]:
        reasons.append(f"pair-gain interval [{ci[0]:+.3%}, {ci[1]:+.3%}] contains 0")
    sign = math.copysign(1.0, combined_gain) if combined_gain != 0 else 0.0
    if sign == 0.0 or any(math.copysign(1.0, g) != sign or g == 0 for g in round_gains):
        reasons.append("round gains do not all share the sign of the combined gain")
    if floor is not None and abs(combined_gain) <= floor:
        reasons.append(f"|gain| {abs(combined_gain):.3%} <= floor {floor:.3%}")
    if reasons:
        return Verdict(NOISE, tuple(reasons))
    return Verdict(FASTER if combined_gain > 0 else SLOWER, ())


def noise_floor(control_gain: float, control_round_gains: Sequence[float]) -> float:
    """The A/A floor: the largest apparent gain of the control, combined or in any round."""
    return max(abs(g) for g in [control_gain, *control_round_gains])
