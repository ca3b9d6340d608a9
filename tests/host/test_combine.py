"""oracle.combine.masked_combine against hand-computed answers (docs/contract.md s6).

Every expected value below is derived by hand from the contract (float32 accumulation in
slot order from +0.0, one bf16 rounding at the end), never from the code under test.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
import torch

from oracle.combine import masked_combine

NAN, INF = float("nan"), float("inf")
BF16 = torch.bfloat16


def _terms(rows: list[list[list[float]]]) -> torch.Tensor:
    t = torch.tensor(rows, dtype=torch.float64)
    b = t.to(BF16)
    assert torch.equal(b.double().nan_to_num(7.0), t.nan_to_num(7.0)), "terms must be bf16-exact"
    return b


def _bits(t: torch.Tensor) -> list:
    return t.contiguous().view(torch.int16).tolist()


# Each case: (terms [T, K, H], ids [T, K], expected out [T, H] as exact floats).
# 2**-24 etc. are exact in bf16 (8 exponent bits, like float32).
HAND_CASES = {
    "exact_terms": (
        [[[1.0, -2.0], [2.0, 0.5], [4.0, 0.25]]],
        [[0, 1, 2]],
        [[7.0, -1.25]],
    ),
    # Naive bf16 accumulation: 1 + 2**-8 is a bf16 tie -> 1.0, then again 1.0. float32 gives
    # 1 + 2**-7 exactly, which is a bf16 value.
    "float32_not_bf16_accumulation": (
        [[[1.0], [2**-8], [2**-8]]],
        [[0, 1, 2]],
        [[1.0 + 2**-7]],
    ),
    # Slot order matters: 1 + 2**-24 is a float32 tie -> 1.0 (twice), then + 2**-8 -> 1 + 2**-8,
    # a bf16 tie -> 1.0. Summed in the reverse order the float32 sum is exact,
    # 1 + 2**-8 + 2**-23, which rounds up to 1 + 2**-7 in bf16 (second row).
    "slot_order": (
        [[[1.0], [2**-24], [2**-24], [2**-8]], [[2**-8], [2**-24], [2**-24], [1.0]]],
        [[0, 1, 2, 3], [0, 1, 2, 3]],
        [[1.0], [1.0 + 2**-7]],
    ),
    # Masked slots contribute nothing, NaN/Inf behind them included; a row with no active
    # slot is +0.0 (second row), and a skipped masked slot does not break slot order.
    "masked_nan_inf": (
        [[[NAN, INF], [3.0, 1.0], [-INF, NAN]], [[NAN, -INF], [INF, NAN], [NAN, NAN]]],
        [[-1, 5, -1], [-1, -1, -1]],
        [[3.0, 1.0], [0.0, 0.0]],
    ),
    # The accumulator starts at +0.0: -0.0 terms sum to +0.0 (IEEE: +0 + -0 = +0).
    "negative_zero_terms": (
        [[[-0.0], [-0.0]]],
        [[1, 2]],
        [[0.0]],
    ),
    # Two bf16-max terms: the float32 sum (6.8e38) overflows to +Inf, which stays +Inf.
    "overflow_to_inf": (
        [[[3.3895313892515355e38], [3.3895313892515355e38]]],
        [[0, 1]],
        [[INF]],
    ),
}


def _run_case(impl: Callable, name: str) -> None:
    terms, ids, expected = HAND_CASES[name]
    out = impl(_terms(terms), torch.tensor(ids, dtype=torch.int64))
    want = torch.tensor(expected, dtype=torch.float64).to(BF16)
    assert out.dtype == BF16 and out.shape == want.shape, name
    assert _bits(out) == _bits(want), f"{name}: {out.tolist()} != {want.tolist()}"


@pytest.mark.contract("s6.combine-slot-order")
@pytest.mark.parametrize("name", sorted(HAND_CASES))
def test_masked_combine_hand_cases(name: str) -> None:
    _run_case(masked_combine, name)


@pytest.mark.contract("s6.inactive-rows-zero")
def test_row_with_no_active_slot_is_positive_zero_bits() -> None:
    terms = torch.full((3, 4, 16), NAN, dtype=BF16)
    terms[1, :, ::2] = INF
    terms[2, :, 1::2] = -INF
    out = masked_combine(terms, torch.full((3, 4), -1, dtype=torch.int32))
    assert _bits(out) == [[0] * 16] * 3


def test_masked_slot_contents_do_not_change_output_bits() -> None:
    g = torch.Generator().manual_seed(0)
    terms = torch.randn((64, 6, 32), generator=g).to(BF16)
    ids = torch.randint(-1, 3, (64, 6), generator=g)
    masked = (ids == -1).unsqueeze(-1)
    poisoned = torch.where(masked, torch.tensor(NAN, dtype=BF16), terms)
    poisoned[:, ::2] = torch.where(masked[:, ::2], torch.tensor(-INF, dtype=BF16), poisoned[:, ::2])
    zeroed = torch.where(masked, torch.tensor(0.0, dtype=BF16), terms)
    a, b, c = (masked_combine(t, ids) for t in (terms, poisoned, zeroed))
    assert _bits(a) == _bits(b) == _bits(c)
    assert bool(torch.isfinite(a.float()).all())


def test_combine_accepts_strided_views_and_never_writes_them() -> None:
    base = torch.arange(2 * 3 * 2 * 4, dtype=torch.float32).reshape(2, 3, 2, 4).to(BF16)
    terms = base[:, :, 1, 1:3]  # [2, 3, 2], non-contiguous, offset storage
    base_ids = torch.tensor([[0, -1, 2, 9], [-1, -1, 1, 9]], dtype=torch.int32)
    ids = base_ids[:, :3]
    before = (base.view(torch.int16).clone(), base_ids.clone())
    out = masked_combine(terms, ids)
    # row 0: slots 0 and 2 -> (5 + 21, 6 + 22); row 1: slot 2 -> (45, 46)
    assert out.tolist() == [[26.0, 28.0], [45.0, 46.0]]
    assert torch.equal(base.view(torch.int16), before[0]) and torch.equal(base_ids, before[1])


@pytest.mark.parametrize(
    ("terms", "ids", "pattern"),
    [
        (
            torch.zeros(2, 3, 4),
            torch.zeros(2, 3, dtype=torch.int32),
            r"terms: expected dtype torch.bfloat16, got torch.float32",
        ),
        (
            torch.zeros(2, 3, dtype=BF16),
            torch.zeros(2, 3, dtype=torch.int32),
            r"terms: expected a 3-D tensor \[T, K, H\], got shape \(2, 3\)",
        ),
        (
            torch.zeros(2, 3, 4, dtype=BF16),
            torch.zeros(2, 2, dtype=torch.int32),
            r"topk_ids: expected shape \(2, 3\).*got shape \(2, 2\)",
        ),
        (
            torch.zeros(2, 3, 4, dtype=BF16),
            torch.zeros(2, 3),
            r"topk_ids: expected dtype int32 or int64, got torch.float32",
        ),
    ],
)
def test_combine_metadata_errors(terms, ids, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        masked_combine(terms, ids)


def _numpy_reference(terms: torch.Tensor, ids: torch.Tensor) -> np.ndarray:
    """Independent reference: numpy float32 adds in slot order, ml_dtypes bf16 rounding."""
    t32 = terms.float().numpy()
    active = ids.numpy() != -1
    acc = np.zeros((t32.shape[0], t32.shape[2]), dtype=np.float32)
    for k in range(t32.shape[1]):
        with np.errstate(invalid="ignore", over="ignore"):
            acc = np.where(active[:, k, None], acc + t32[:, k], acc).astype(np.float32)
    return acc.astype(ml_dtypes.bfloat16).view(np.int16)


@pytest.mark.contract("s6.combine-slot-order", "s8.bitwise-stages")
@pytest.mark.parametrize("seed", range(4))
def test_masked_combine_matches_independent_float32_reference(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    t, k, h = 257, 8, 24
    # Wide exponent spread so float32 rounding inside the sum and the final bf16 rounding
    # both matter; a few Infs in active slots too.
    mant = torch.randn((t, k, h), generator=g)
    expo = torch.randint(-30, 30, (t, k, h), generator=g).float()
    terms = (mant * torch.exp2(expo)).to(BF16)
    terms[torch.rand((t, k, h), generator=g) < 0.001] = INF
    ids = torch.randint(-1, 16, (t, k), generator=g)
    ids[torch.rand((t,), generator=g) < 0.1] = -1  # rows with no active slot
    masked = (ids == -1).unsqueeze(-1).expand_as(terms)
    terms = torch.where(masked & (torch.rand((t, k, h), generator=g) < 0.5), NAN, terms)
    out = masked_combine(terms, ids)
    assert out.view(torch.int16).tolist() == _numpy_reference(terms, ids).tolist()


# ---------------------------------------------------------------- planted bugs


def _combine_adds_masked_slots(terms: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Planted bug: sums every slot, masked ones included."""
    del ids
    acc = torch.zeros(terms.shape[0], terms.shape[2])
    for k in range(terms.shape[1]):
        acc = acc + terms[:, k].float()
    return acc.to(BF16)


def _combine_multiplies_by_mask(terms: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Planted bug: "zeroes" masked slots by multiplying by 0 (NaN * 0 = NaN)."""
    mask = (ids != -1).float().unsqueeze(-1)
    acc = torch.zeros(terms.shape[0], terms.shape[2])
    for k in range(terms.shape[1]):
        acc = acc + terms[:, k].float() * mask[:, k]
    return acc.to(BF16)


def _combine_in_bf16(terms: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Planted bug: accumulates in bf16 (rounds after every slot)."""
    active = (ids != -1).unsqueeze(-1)
    acc = torch.zeros(terms.shape[0], terms.shape[2], dtype=BF16)
    for k in range(terms.shape[1]):
        acc = torch.where(active[:, k], acc + terms[:, k], acc)
    return acc


def _combine_unordered_sum(terms: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Planted bug: float64 sum (order/precision not the contract's)."""
    active = (ids != -1).unsqueeze(-1)
    return torch.where(active, terms.double(), 0.0).sum(1).to(BF16)


@pytest.mark.parametrize(
    ("broken", "case"),
    [
        (_combine_adds_masked_slots, "masked_nan_inf"),
        (_combine_multiplies_by_mask, "masked_nan_inf"),
        (_combine_in_bf16, "float32_not_bf16_accumulation"),
        (_combine_unordered_sum, "slot_order"),
    ],
)
def test_planted_combine_bugs_are_caught(broken: Callable, case: str) -> None:
    with pytest.raises(AssertionError):
        _run_case(broken, case)
