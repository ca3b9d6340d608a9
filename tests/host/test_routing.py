"""Hand-built cases for oracle.routing (docs/contract.md s2, s3, s8).

Expected values are written out by hand from the contract, never computed by the code
under test. Random/property coverage and the planted-bug demonstrations live in
tests/property/test_routing_properties.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from oracle.routing import (
    RULE_DUPLICATE_ID,
    RULE_ID_OUT_OF_RANGE,
    RULE_NON_FINITE_SCORE,
    SCORE_DTYPES,
    DispatchLayout,
    RouteViolation,
    dispatch_layout,
    find_route_violations,
    stage_routes,
)

NAN, INF = float("nan"), float("inf")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).clone()


@pytest.mark.contract("s1.route-dtypes-and-layouts")
def test_the_score_dtypes_are_the_contracts_four_everywhere() -> None:
    """The tests draw scores from the oracle's list, so the list itself is checked against
    the contract's text: float16, bfloat16, float32, float64, in the oracle, the
    validation of every kernel path and the layer."""
    from megamoe import validation
    from megamoe.layer import moe_layer

    contract = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    for listed in (SCORE_DTYPES, validation.SCORE_DTYPES, moe_layer.SCORE_DTYPES):
        assert listed == contract


# ---------------------------------------------------------------- find_route_violations


@pytest.mark.contract("s2.masked-any-score")
def test_masked_slots_may_carry_any_score_and_repeat() -> None:
    ids = torch.tensor([[-1, -1, -1], [0, -1, -1]], dtype=torch.int32)
    w = torch.tensor([[NAN, INF, -INF], [0.5, NAN, -INF]])
    assert find_route_violations(ids, w, 4) == []


@pytest.mark.contract("s2.caller-dtype-checks")
def test_id_out_of_range_is_judged_before_narrowing() -> None:
    # int64 2**32 narrows to int32 0 (a valid expert); the contract says out of range.
    ids = torch.tensor([[2**32, 1], [-(2**32) - 1, 0]], dtype=torch.int64)
    w = torch.ones(2, 2)
    got = find_route_violations(ids, w, 4)
    assert got == [
        RouteViolation(0, 0, 2**32, 1.0, RULE_ID_OUT_OF_RANGE),
        RouteViolation(1, 0, -(2**32) - 1, 1.0, RULE_ID_OUT_OF_RANGE),
    ]


@pytest.mark.contract("s2.active-slot-rules")
def test_id_out_of_range_edges() -> None:
    ids = torch.tensor([[0, 3, 4, -2]], dtype=torch.int32)
    got = find_route_violations(ids, torch.ones(1, 4, dtype=torch.float16), 4)
    assert [(v.slot, v.expert_id, v.rule) for v in got] == [
        (2, 4, RULE_ID_OUT_OF_RANGE),
        (3, -2, RULE_ID_OUT_OF_RANGE),
    ]


@pytest.mark.contract("s2.active-slot-rules")
def test_duplicate_id_reports_every_slot_of_the_id() -> None:
    ids = torch.tensor([[2, 5, 2, -1, -1], [1, 2, 3, 4, 5]], dtype=torch.int64)
    got = find_route_violations(ids, torch.ones(2, 5, dtype=torch.bfloat16), 8)
    assert got == [
        RouteViolation(0, 0, 2, 1.0, RULE_DUPLICATE_ID),
        RouteViolation(0, 2, 2, 1.0, RULE_DUPLICATE_ID),
    ]


@pytest.mark.contract("s2.active-slot-rules")
def test_non_finite_active_score() -> None:
    ids = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    w = torch.tensor([[NAN, INF, -INF]], dtype=torch.float64)
    got = find_route_violations(ids, w, 3)
    assert [(v.slot, v.rule) for v in got] == [(k, RULE_NON_FINITE_SCORE) for k in range(3)]
    assert math.isnan(got[0].score) and got[1].score == INF and got[2].score == -INF


def test_violations_sorted_by_row_slot_rule_and_one_per_rule() -> None:
    ids = torch.tensor([[7, 1], [0, 0]], dtype=torch.int64)
    w = torch.tensor([[NAN, 1.0], [1.0, 1.0]])
    got = find_route_violations(ids, w, 4)
    assert [(v.row, v.slot, v.rule) for v in got] == [
        (0, 0, RULE_ID_OUT_OF_RANGE),
        (0, 0, RULE_NON_FINITE_SCORE),
        (1, 0, RULE_DUPLICATE_ID),
        (1, 1, RULE_DUPLICATE_ID),
    ]


def test_fp16_overflowing_score_is_non_finite() -> None:
    w = torch.tensor([[70000.0]]).to(torch.float16)  # rounds to +Inf in float16
    got = find_route_violations(torch.zeros(1, 1, dtype=torch.int32), w, 1)
    assert [(v.rule, v.score) for v in got] == [(RULE_NON_FINITE_SCORE, INF)]


def test_empty_batch_has_no_violations() -> None:
    assert find_route_violations(torch.zeros(0, 4, dtype=torch.int64), torch.zeros(0, 4), 2) == []


# ---------------------------------------------------------------- stage_routes


@pytest.mark.contract("s3.live-rows-staged", "s3.tail-rows-emptied")
def test_stage_masked_scores_become_positive_zero_and_tail_is_reset() -> None:
    ids = torch.tensor([[1, -1, 0], [-1, 2, -1]], dtype=torch.int64)
    w = torch.tensor([[-0.0, NAN, 0.25], [-INF, 3.0, -0.0]], dtype=torch.float64)
    sid, sw = stage_routes(ids, w, 4)
    assert sid.dtype == torch.int32 and sw.dtype == torch.float32
    assert sid.tolist() == [[1, -1, 0], [-1, 2, -1], [-1, -1, -1], [-1, -1, -1]]
    # Bit patterns: -0.0 = 0x80000000 (active slot keeps its sign), +0.0 = 0, 0.25 = 0x3E800000,
    # 3.0 = 0x40400000.
    expected_bits = [[-(2**31), 0, 0x3E800000], [0, 0x40400000, 0], [0] * 3, [0] * 3]
    assert sw.view(torch.int32).tolist() == expected_bits


@pytest.mark.contract("s3.live-rows-staged")
def test_stage_float64_scores_round_to_nearest_even() -> None:
    # 1 + 2**-24 is a float32 tie between 1.0 and 1 + 2**-23: rounds to even (1.0);
    # 1 + 3 * 2**-24 is a tie between 1 + 2**-23 and 1 + 2**-22: rounds to 1 + 2**-22.
    w = torch.tensor([[1 + 2**-24, 1 + 3 * 2**-24]], dtype=torch.float64)
    _, sw = stage_routes(torch.tensor([[0, 1]], dtype=torch.int32), w, 1)
    assert sw.view(torch.int32).tolist() == [[0x3F800000, 0x3F800002]]


@pytest.mark.contract("s3.tail-rows-emptied")
def test_stage_empty_batch_gives_all_masked_capacity() -> None:
    sid, sw = stage_routes(torch.zeros(0, 2, dtype=torch.int32), torch.zeros(0, 2), 3)
    assert sid.tolist() == [[-1, -1]] * 3
    assert sw.view(torch.int32).tolist() == [[0, 0]] * 3


@pytest.mark.contract("s1.route-dtypes-and-layouts", "s3.no-stray-writes")
def test_stage_accepts_strided_offset_views_and_never_writes_them() -> None:
    base_ids = torch.tensor([[9, 9, 9, 9], [9, 0, 9, -1], [9, 2, 9, 1]], dtype=torch.int64)
    base_w = torch.tensor([[7.0, 7, 7, 7], [7, 0.5, 7, NAN], [7, 0.75, 7, 1.5]])
    ids = base_ids[1:, 1::2]  # storage offset 5, strides (4, 2)
    w = base_w[1:, 1::2]
    before = (_bytes(base_ids), _bytes(base_w))
    sid, sw = stage_routes(ids, w, 3)
    assert sid.tolist() == [[0, -1], [2, 1], [-1, -1]]
    assert sw.tolist() == [[0.5, 0.0], [0.75, 1.5], [0.0, 0.0]]
    assert torch.equal(before[0], _bytes(base_ids)) and torch.equal(before[1], _bytes(base_w))


@pytest.mark.contract("s1.route-dtypes-and-layouts")
def test_stage_transposed_view() -> None:
    ids = torch.tensor([[0, 2], [1, -1]], dtype=torch.int32).t()  # [[0, 1], [2, -1]]
    w = torch.tensor([[1.0, 2.0], [3.0, INF]], dtype=torch.bfloat16).t()
    sid, sw = stage_routes(ids, w, 2)
    assert sid.tolist() == [[0, 1], [2, -1]]
    assert sw.tolist() == [[1.0, 3.0], [2.0, 0.0]]


@pytest.mark.contract("s2.caller-dtype-checks")
def test_stage_never_wraps_an_int64_id() -> None:
    ids = torch.tensor([[0, 2**32]], dtype=torch.int64)
    with pytest.raises(ValueError, match=r"topk_ids\[0, 1\].*int32.*4294967296"):
        stage_routes(ids, torch.ones(1, 2), 2)


@pytest.mark.contract("s2.route-error-eager")
def test_stage_with_num_experts_runs_value_checks() -> None:
    ids = torch.tensor([[0, 1], [3, 3]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"row 1, slot 0.*duplicate_id"):
        stage_routes(ids, torch.ones(2, 2), 2, num_experts=4)
    with pytest.raises(ValueError, match=r"row 0, slot 1.*id_out_of_range"):
        stage_routes(ids, torch.ones(2, 2), 2, num_experts=1)
    sid, _ = stage_routes(ids[:1], torch.ones(1, 2), 2, num_experts=4)
    assert sid.tolist() == [[0, 1], [-1, -1]]


@pytest.mark.contract("s2.metadata-checks")
@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (
            lambda: stage_routes(torch.zeros(3, 2, dtype=torch.int32), torch.zeros(3, 2), 2),
            r"topk_ids: expected at most capacity=2 rows \(T <= C\), got T=3",
        ),
        (
            lambda: stage_routes(torch.zeros(3, 2, dtype=torch.int16), torch.zeros(3, 2), 4),
            r"topk_ids: expected dtype int32 or int64, got torch.int16",
        ),
        (
            lambda: stage_routes(
                torch.zeros(3, 2, dtype=torch.int32), torch.zeros(3, 2, dtype=torch.int32), 4
            ),
            r"topk_weights: expected dtype float16, bfloat16, float32 or float64, got torch.int32",
        ),
        (
            lambda: stage_routes(torch.zeros(3, 2, dtype=torch.int32), torch.zeros(3, 3), 4),
            r"topk_weights: expected shape \(3, 2\).*got shape \(3, 3\)",
        ),
        (
            lambda: stage_routes(torch.zeros(6, dtype=torch.int32), torch.zeros(6), 6),
            r"topk_ids: expected a 2-D tensor \[T, K\], got shape \(6,\)",
        ),
        (
            lambda: stage_routes(torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, 2), 0),
            r"capacity: expected an int >= 1, got 0",
        ),
        (
            lambda: stage_routes(torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, 2), True),
            r"capacity: expected an int >= 1, got bool True",
        ),
        (
            lambda: stage_routes(torch.zeros(1, 0, dtype=torch.int32), torch.zeros(1, 0), 2),
            r"topk_ids: expected K >= 1",
        ),
        (
            lambda: find_route_violations(
                torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, 2), 0
            ),
            r"num_experts: expected an int >= 1, got 0",
        ),
        (
            lambda: find_route_violations([[0]], torch.zeros(1, 1), 2),
            r"topk_ids: expected a torch.Tensor, got list",
        ),
    ],
)
def test_route_metadata_errors_name_argument_expected_actual(call, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        call()


# ---------------------------------------------------------------- dispatch_layout


def test_dispatch_layout_hand_case() -> None:
    # P=2, E=4 (rank 0 owns experts 0,1; rank 1 owns 2,3), C=3, K=2.
    r0 = torch.tensor([[3, 0], [-1, -1], [-1, -1]], dtype=torch.int32)
    r1 = torch.tensor([[-1, 0], [2, 3], [-1, 7]], dtype=torch.int32)  # 7 is out of range
    lay = dispatch_layout([r0, r1], num_experts=4, world_size=2)
    assert isinstance(lay, DispatchLayout)
    exp = {
        "counts": [[1, 0, 0, 1], [1, 0, 1, 1]],
        "expert_counts": [2, 0, 1, 2],
        "rank_counts": [2, 3],
        "expert_offsets": [0, 2, 2, 3, 5],
        "order": [[0, 0, 1], [1, 0, 1], [1, 1, 0], [0, 0, 0], [1, 1, 1]],
        "order_expert": [0, 0, 2, 3, 3],
        "active_extent": [1, 2],
    }
    for field, want in exp.items():
        got = getattr(lay, field)
        assert got.dtype == torch.int64, field
        assert got.tolist() == want, field


def test_dispatch_layout_all_masked_is_empty() -> None:
    r = torch.full((4, 3), -1, dtype=torch.int32)
    lay = dispatch_layout([r, r, r], num_experts=6, world_size=3)
    assert lay.order.shape == (0, 3) and lay.order_expert.shape == (0,)
    assert lay.active_extent.tolist() == [0, 0, 0]
    assert lay.expert_offsets.tolist() == [0] * 7
    assert lay.counts.tolist() == [[0] * 6] * 3


def test_dispatch_layout_extent_is_last_active_row_plus_one() -> None:
    r = torch.full((5, 2), -1, dtype=torch.int32)
    r[3, 1] = 0
    r[1, 0] = 0
    assert dispatch_layout([r], 1, 1).active_extent.tolist() == [4]


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (
            ([torch.zeros(2, 2, dtype=torch.int32)], 4, 2),
            r"staged_ids_per_rank: expected 2 tensors \(world_size\), got 1",
        ),
        (
            ([torch.zeros(2, 2, dtype=torch.int64)], 4, 1),
            r"staged_ids_per_rank\[0\]: expected dtype torch.int32, got torch.int64",
        ),
        (
            ([torch.zeros(2, 2, dtype=torch.int32), torch.zeros(3, 2, dtype=torch.int32)], 4, 2),
            r"staged_ids_per_rank\[1\]: expected shape \(2, 2\).*got shape \(3, 2\)",
        ),
        (
            ([torch.zeros(2, 2, dtype=torch.int32)] * 3, 4, 3),
            r"num_experts: expected a multiple of world_size=3, got 4",
        ),
        (([torch.zeros(2, 2, dtype=torch.int32)], 4, 0), r"world_size: expected an int >= 1"),
    ],
)
def test_dispatch_layout_metadata_errors(args, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        dispatch_layout(*args)


@pytest.mark.contract("s3.nan-score-canonical")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_stage_active_nan_score_is_canonical_nan(dtype: torch.dtype) -> None:
    # An active NaN score is an invalid route (staged only with checks off); its float32
    # bits are the canonical quiet NaN 0x7FC00000 (docs/contract.md v2 s3) whatever the payload
    # or sign of the caller's NaN.
    w = torch.tensor([[NAN, -NAN, 1.0]], dtype=dtype)
    if dtype in (torch.float32, torch.float64):  # a signalling-style payload too
        w = torch.cat([w, torch.tensor([[0.5]], dtype=dtype)], dim=1)
        w.view(torch.int32 if dtype == torch.float32 else torch.int64)[0, 3] = (
            0x7F800001 if dtype == torch.float32 else 0x7FF0000000000001)
    ids = torch.tensor([[0, 1, -1, 2][: w.shape[1]]], dtype=torch.int32)
    _, sw = stage_routes(ids, w, 1)
    want = [0x7FC00000, 0x7FC00000, 0] + [0x7FC00000] * (w.shape[1] - 3)
    assert sw.view(torch.int32).tolist() == [want]
