"""The s8 judge itself (docs/contract.md s8, ``oracle.compare.compare_rows``): a non-finite
reference row fails, every failing row is named (with its rank when given), and bad
arguments get the same clear errors as the rest of the API. Each rule is shown to fail on
an output that breaks it."""

from __future__ import annotations

import pytest
import torch

from oracle.compare import compare_rows

T, H = 6, 32


def _case(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    want = torch.randn(T, H, generator=g).bfloat16()
    ids = torch.tensor([[0, 1], [2, -1], [-1, -1], [3, 4], [5, 6], [7, -1]])
    want[2] = 0.0  # the inactive row
    return want.clone(), want, ids


def test_an_exact_output_passes_with_zero_error() -> None:
    got, want, ids = _case()
    report = compare_rows(got, want, ids, "bf16")
    assert report.problems == () and report.failing_rows == ()
    assert report.worst_row_rel_l2 == 0.0 and report.total_rel_l2 == 0.0


@pytest.mark.contract("s8.row-tolerance")
def test_a_non_finite_reference_row_is_a_failure_never_a_pass() -> None:
    got, want, ids = _case()
    want[3, 0] = float("nan")
    got[3, 0] = float("nan")  # the same NaN in the output must not make the row pass
    report = compare_rows(got, want, ids, "bf16")
    assert report.failing_rows == (3,)
    assert any("not finite in the reference" in p for p in report.problems)


@pytest.mark.contract("s8.row-tolerance")
def test_every_failing_row_is_named_not_only_the_first() -> None:
    got, want, ids = _case()
    for row in (0, 3, 5):
        got[row] = (want[row].float() * 1.5).bfloat16()
    got[2, 4] = -0.0  # the inactive row must be +0.0 bytes
    report = compare_rows(got, want, ids, "bf16", rank=3)
    assert report.failing_rows == (0, 2, 3, 5)
    assert all(p.startswith("rank 3: ") for p in report.problems)
    assert any("0, 3, 5" in p for p in report.problems)


@pytest.mark.contract("s8.row-tolerance")
def test_each_row_is_measured_against_its_own_norm() -> None:
    """Row 1 is 1000x smaller than the others and 10 % off (bf16's bound is 1 %): against
    its own norm its error is 0.1, against the whole output's about 1e-4. It must fail; the
    other rows are exact."""
    got, want, ids = _case()
    want[1] = (want[1].float() * 1e-3).bfloat16()
    got[1] = (want[1].float() * 1.1).bfloat16()
    report = compare_rows(got, want, ids, "bf16")
    assert report.failing_rows == (1,)
    assert report.worst_row_rel_l2 == pytest.approx(0.1, rel=0.05)
    assert report.total_rel_l2 < 1e-3  # the whole output alone would have passed


@pytest.mark.parametrize(("args", "name"), [
    ((torch.zeros(T, H, dtype=torch.float32), None, None), "got.dtype"),
    ((None, torch.zeros(T, H, dtype=torch.float64), None), "want.dtype"),
    ((torch.zeros(T + 1, H, dtype=torch.bfloat16), None, None), "want.shape"),
    ((None, None, torch.zeros(T - 1, 2, dtype=torch.int64)), "topk_ids.shape"),
    (("out", None, None), "got"),
    ((None, None, [[0, 1]]), "topk_ids"),
])
def test_bad_arguments_raise_a_value_error_naming_them(args, name) -> None:  # type: ignore[no-untyped-def]
    got, want, ids = _case()
    got, want, ids = (a if a is not None else d for a, d in zip(args, (got, want, ids),
                                                                strict=True))
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        compare_rows(got, want, ids, "bf16")
