"""Property tests: oracle.routing against independent plain-Python references (docs/contract.md s2, s3, s8).

The references below are written from the contract text with Python ints/floats and loops
(numpy only for the float32 rounding of a score); they share no code with oracle.routing.
Each property also runs against a deliberately broken variant, to show the check can fail.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from oracle.routing import (
    RULE_DUPLICATE_ID,
    RULE_ID_OUT_OF_RANGE,
    RULE_NON_FINITE_SCORE,
    SCORE_DTYPES,
    dispatch_layout,
    find_route_violations,
    stage_routes,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
CANONICAL_NAN = 0x7FC00000  # float32 bits of a staged NaN score (docs/contract.md v2 s3)
BIG_INT64_IDS = (2**31, 2**32, 2**32 + 1, -(2**32), -(2**32) - 1, 2**63 - 1, -(2**63))
INT32_EDGE_IDS = (-2, INT32_MIN, INT32_MAX)

# ------------------------------------------------------------------ plain-Python references


def ref_violations(ids: list[list[int]], scores: list[list[float]], e: int) -> list[tuple]:
    """Every broken rule, per the contract text (s2), as (row, slot, id, score, rule)."""
    out = []
    for t, (row_ids, row_scores) in enumerate(zip(ids, scores, strict=True)):
        for k, (i, s) in enumerate(zip(row_ids, row_scores, strict=True)):
            if i == -1:
                continue
            if not 0 <= i < e:
                out.append((t, k, i, s, RULE_ID_OUT_OF_RANGE))
            if math.isnan(s) or math.isinf(s):
                out.append((t, k, i, s, RULE_NON_FINITE_SCORE))
            if 0 <= i < e:
                others = [row_ids[j] for j in range(len(row_ids)) if j != k]
                if i in others:
                    out.append((t, k, i, s, RULE_DUPLICATE_ID))
    out.sort(key=lambda v: (v[0], v[1], v[4]))
    return out


def _numpy_scores(scores: torch.Tensor) -> np.ndarray:
    """The caller's scores as a numpy array of the same dtype (bit for bit, NaN payloads too)."""
    dense = scores.contiguous()
    if dense.dtype == torch.bfloat16:
        return dense.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return dense.numpy()


def ref_stage(ids: list[list[int]], scores: np.ndarray, capacity: int, k: int):
    """Staged (ids, float32 score bit patterns) as Python lists (s3).

    ``scores`` holds the caller's values in the caller's dtype; each active score is
    converted on its own by numpy/ml_dtypes (round to nearest even), a NaN stages as the
    canonical 0x7FC00000, each masked score as +0.0 (bits 0).
    """
    sid, sbits = [], []
    for t in range(capacity):
        if t < len(ids):
            sid.append([int(i) for i in ids[t]])
            bits = []
            for j, i in enumerate(ids[t]):
                with np.errstate(over="ignore", invalid="ignore"):
                    f = (
                        np.zeros(1, np.float32)
                        if i == -1
                        else scores[t, j : j + 1].astype(np.float32)
                    )
                bits.append(CANONICAL_NAN if np.isnan(f[0]) else int(f.view(np.int32)[0]))
            sbits.append(bits)
        else:
            sid.append([-1] * k)
            sbits.append([0] * k)
    return sid, sbits


def ref_layout(staged: list[list[list[int]]], e: int, p: int) -> dict[str, list]:
    """Dispatch layout fields (s8) by brute force over every slot."""
    el = e // p
    counts = [[0] * e for _ in range(p)]
    entries = []
    extent = [0] * p
    for r, rows in enumerate(staged):
        for t, row in enumerate(rows):
            for k, i in enumerate(row):
                if 0 <= i < e:
                    counts[r][i] += 1
                    entries.append((i, r, t, k))
                    extent[r] = t + 1
    expert_counts = [sum(counts[r][x] for r in range(p)) for x in range(e)]
    offsets = [0]
    for c in expert_counts:
        offsets.append(offsets[-1] + c)
    entries.sort()
    return {
        "counts": counts,
        "expert_counts": expert_counts,
        "rank_counts": [sum(expert_counts[q * el : (q + 1) * el]) for q in range(p)],
        "expert_offsets": offsets,
        "order": [[r, t, k] for (_, r, t, k) in entries],
        "order_expert": [x for (x, _, _, _) in entries],
        "active_extent": extent,
    }


# ------------------------------------------------------------------ strategies


def _layout(draw, values: list[list], k: int, dtype: torch.dtype) -> torch.Tensor:
    """A [T, K] tensor holding values, as a contiguous, strided/offset or transposed view."""
    t = len(values)
    kind = draw(st.sampled_from(["contiguous", "strided", "transposed"]))
    dense = torch.tensor(values, dtype=torch.float64 if dtype.is_floating_point else torch.int64)
    dense = dense.reshape(t, k).to(dtype)
    if kind == "contiguous":
        return dense
    if kind == "transposed":
        return dense.t().contiguous().t()
    base = torch.zeros((t + 2, 2 * k + 1), dtype=dtype)
    base[1 : t + 1, 1 : 2 * k + 1 : 2] = dense
    return base[1 : t + 1, 1 : 2 * k + 1 : 2]


SCORE_VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.0, -0.0, 1.0, 5e-324, 1e-40, 3.4e38, 3.5e38, 65520.0]),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


@st.composite
def routes(draw, *, big_ids: bool = True):
    """(ids tensor, scores tensor, num_experts, ids list, scores list as stored)."""
    t = draw(st.integers(0, 6))
    k = draw(st.integers(1, 5))
    e = draw(st.integers(1, 8))
    id_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    score_dtype = draw(st.sampled_from(SCORE_DTYPES))
    edges = [*INT32_EDGE_IDS, e, e + 1]
    if big_ids and id_dtype == torch.int64:
        edges += list(BIG_INT64_IDS)
    id_values = st.one_of(st.just(-1), st.integers(0, e - 1), st.sampled_from(edges))
    ids = [[draw(id_values) for _ in range(k)] for _ in range(t)]
    scores = [[draw(SCORE_VALUES) for _ in row] for row in ids]
    ids_t = _layout(draw, ids, k, id_dtype)
    sc_t = _layout(draw, scores, k, score_dtype)
    # The caller's values as stored (float16/bfloat16 rounding, overflow to Inf included).
    return ids_t, sc_t, e, ids_t.tolist(), sc_t.double().tolist()


def _snapshot(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Byte copies of the whole storage behind each tensor (views included)."""
    return [torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage()).clone() for x in tensors]


# ------------------------------------------------------------------ checkers


def check_violations(impl: Callable, ids_t, sc_t, e, ids, scores) -> None:
    before = _snapshot(ids_t, sc_t)
    got = [tuple(v) for v in impl(ids_t, sc_t, e)]
    want = ref_violations(ids, scores, e)
    # Compare with NaN-aware equality on the score field.
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want, strict=True):
        assert g[:3] == w[:3] and g[4] == w[4], (g, w)
        assert (math.isnan(g[3]) and math.isnan(w[3])) or g[3] == w[3], (g, w)
    after = _snapshot(ids_t, sc_t)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True)), "input written"


def check_stage(impl: Callable, ids_t, sc_t, capacity, ids, scores) -> None:
    before = _snapshot(ids_t, sc_t)
    sid, ssc = impl(ids_t, sc_t, capacity)
    del scores  # the reference reads the caller's exact bits instead of Python floats
    want_ids, want_bits = ref_stage(ids, _numpy_scores(sc_t), capacity, ids_t.shape[1])
    assert sid.dtype == torch.int32 and ssc.dtype == torch.float32
    assert sid.shape == ssc.shape == (capacity, ids_t.shape[1])
    assert torch.equal(sid, torch.tensor(want_ids, dtype=torch.int32).reshape(sid.shape))
    assert torch.equal(
        ssc.view(torch.int32), torch.tensor(want_bits, dtype=torch.int32).reshape(ssc.shape)
    )
    after = _snapshot(ids_t, sc_t)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True)), "input written"


def check_layout(impl: Callable, staged: list[torch.Tensor], e: int, p: int) -> None:
    lay = impl(staged, e, p)
    want = ref_layout([s.tolist() for s in staged], e, p)
    for field, value in want.items():
        got = getattr(lay, field)
        assert got.dtype == torch.int64, field
        expect = torch.tensor(value, dtype=torch.int64)
        if field == "order":
            expect = expect.reshape(-1, 3)
        assert torch.equal(got, expect), (field, got.tolist(), value)


# ------------------------------------------------------------------ properties


@pytest.mark.contract("s2.active-slot-rules", "s2.masked-any-score")
@given(routes())
@example(
    (
        torch.tensor([[2**32, 0]], dtype=torch.int64),
        torch.tensor([[1.0, 2.0]]),
        4,
        [[2**32, 0]],
        [[1.0, 2.0]],
    )
)
def test_find_route_violations_matches_brute_force(case) -> None:
    check_violations(find_route_violations, *case)


def _fits_int32(ids: list[list[int]]) -> bool:
    return all(INT32_MIN <= i <= INT32_MAX for row in ids for i in row)


@pytest.mark.contract("s1.route-dtypes-and-layouts", "s3.live-rows-staged", "s3.nan-score-canonical", "s3.tail-rows-emptied", "s8.bitwise-stages")
@given(routes(big_ids=False), st.integers(0, 3))
def test_stage_routes_is_byte_exact(case, extra_rows) -> None:
    ids_t, sc_t, _, ids, scores = case
    capacity = max(1, ids_t.shape[0] + extra_rows)
    check_stage(stage_routes, ids_t, sc_t, capacity, ids, scores)


@pytest.mark.contract("s2.caller-dtype-checks")
@given(routes())
def test_stage_routes_never_wraps_and_checks_values(case) -> None:
    ids_t, sc_t, e, ids, scores = case
    capacity = max(1, ids_t.shape[0])
    if not _fits_int32(ids):
        with pytest.raises(ValueError, match="narrowing never wraps"):
            stage_routes(ids_t, sc_t, capacity)
        return
    if ref_violations(ids, scores, e):
        with pytest.raises(ValueError, match="bad route"):
            stage_routes(ids_t, sc_t, capacity, num_experts=e)
    else:
        sid, _ = stage_routes(ids_t, sc_t, capacity, num_experts=e)
        assert sid[: len(ids)].tolist() == ids


@st.composite
def staged_worlds(draw):
    p = draw(st.integers(1, 4))
    e = p * draw(st.integers(1, 3))
    c = draw(st.integers(1, 5))
    k = draw(st.integers(1, 4))
    value = st.one_of(st.just(-1), st.integers(0, e - 1), st.sampled_from([-2, e, e + 5]))
    staged = [
        torch.tensor([[draw(value) for _ in range(k)] for _ in range(c)], dtype=torch.int32)
        for _ in range(p)
    ]
    return staged, e, p


@pytest.mark.contract("s8.bitwise-stages")
@given(staged_worlds())
def test_dispatch_layout_matches_brute_force(world) -> None:
    check_layout(dispatch_layout, *world)


# ------------------------------------------------------------------ planted bugs

# Fixed witnesses (each would also be found by the properties above).
WITNESS_BIG_ID = (
    torch.tensor([[2**32, 1], [-1, 2**32 + 2]], dtype=torch.int64),
    torch.tensor([[0.5, 0.25], [math.nan, 1.0]]),
    4,
    [[2**32, 1], [-1, 2**32 + 2]],
    [[0.5, 0.25], [math.nan, 1.0]],
)
WITNESS_STAGE = (
    torch.tensor([[1, -1], [0, 2]], dtype=torch.int32),
    torch.tensor([[0.5, math.nan], [0.25, -0.0]]),
    4,
    [[1, -1], [0, 2]],
    [[0.5, math.nan], [0.25, -0.0]],
)
WITNESS_LAYOUT = (
    [
        torch.tensor([[-1, -1], [0, -1]], dtype=torch.int32),
        torch.tensor([[0, 3], [2, -1]], dtype=torch.int32),
    ],
    4,
    2,
)


def _violations_narrowing_first(ids, scores, e):
    """Planted bug: range check after narrowing to int32 (2**32 wraps to expert 0)."""
    return find_route_violations(ids.to(torch.int32), scores, e)


def _stage_forgets_tail(ids, scores, capacity):
    """Planted bug: tail rows of a zero-initialized buffer are never rewritten."""
    sid, ssc = stage_routes(ids, scores, capacity)
    sid[ids.shape[0] :] = 0
    return sid, ssc


def _stage_keeps_masked_scores(ids, scores, capacity):
    """Planted bug: masked scores are copied instead of zeroed."""
    sid, ssc = stage_routes(ids, scores, capacity)
    ssc[: ids.shape[0]] = scores.float()
    return sid, ssc


def _layout_counts_masked(staged, e, p):
    """Planted bug: masked slots (-1) counted, as expert 0."""
    return dispatch_layout([s.clamp(min=0) for s in staged], e, p)


def _layout_unstable_order(staged, e, p):
    """Planted bug: order sorted by (expert, row, src_rank, slot)."""
    lay = dispatch_layout(staged, e, p)
    key = (
        lay.order_expert * 10**6 + lay.order[:, 1] * 10**3 + lay.order[:, 0] * 10 + lay.order[:, 2]
    )
    perm = torch.argsort(key)
    return dataclasses.replace(lay, order=lay.order[perm])


@pytest.mark.parametrize(
    ("check", "broken", "witness"),
    [
        (check_violations, _violations_narrowing_first, WITNESS_BIG_ID),
        (check_stage, _stage_forgets_tail, WITNESS_STAGE),
        (check_stage, _stage_keeps_masked_scores, WITNESS_STAGE),
        (check_layout, _layout_counts_masked, WITNESS_LAYOUT),
        (check_layout, _layout_unstable_order, WITNESS_LAYOUT),
    ],
    ids=[
        "range-after-narrowing",
        "stage-forgets-tail",
        "stage-keeps-masked-scores",
        "layout-counts-masked",
        "layout-order-not-src-rank-major",
    ],
)
def test_planted_routing_bugs_are_caught(check, broken, witness) -> None:
    # The real implementation passes the witness; the broken one fails the same check.
    real = {
        check_violations: find_route_violations,
        check_stage: stage_routes,
        check_layout: dispatch_layout,
    }[check]
    check(real, *witness)
    with pytest.raises(AssertionError):
        check(broken, *witness)
