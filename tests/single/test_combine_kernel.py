"""Masked-combine kernel on the GPU vs the oracle, bitwise (docs/contract.md s6, s8, s9).

The oracle (``oracle.combine.masked_combine``) runs on the same device; outputs are compared
as bytes (NaN payloads and signed zeros included). Outputs live inside guard rows that must
keep their poison bytes; caller inputs must be left unchanged.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from megamoe.combine import PLAN_SCALAR, PLAN_TORCH, PLAN_WIDE, combine_plan, masked_combine
from megamoe.combine import warmup as combine_warmup
from megamoe.graphs import capture
from oracle.combine import masked_combine as oracle_combine
from tests.host.test_dispatch_combine_host import assert_bits_equal

REPLAYS_PER_STATE = 17
BF16 = torch.bfloat16
POISON_BITS = 0x7FC1  # a quiet-NaN bf16 pattern that no kernel writes
SPECIALS = torch.tensor(
    [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 3.0e38, -3.0e38, 1e-40, 2.0**-133],
    dtype=torch.float32,
)
HIDDEN_SIZES = [1, 2, 3, 8, 16, 24, 136, 1024, 2880]
LAYOUTS = ("contig", "padded", "offset1")
MAX_ELEMS = 4_000_000


def _poisoned(rows: int, hidden: int, device) -> torch.Tensor:
    return torch.full((rows, hidden), POISON_BITS, dtype=torch.int16, device=device).view(BF16)


def _case(seed: int, rows: int, top_k: int, hidden: int, masked_p: float, id_dtype,
          active_specials: bool, layout: str, device):
    """(terms [R, K, H] bf16 view in the requested layout, ids [R, K]) on ``device``.

    Masked slots always hold NaN/+Inf/-Inf terms; active terms are N(0, 4) values, with
    ``active_specials`` also NaN, +-Inf, +-0, huge and subnormal values."""
    g = torch.Generator().manual_seed(seed)
    vals = torch.randn((rows, top_k, hidden), generator=g) * 4
    if active_specials:
        pick = torch.rand((rows, top_k, hidden), generator=g) < 0.1
        vals[pick] = SPECIALS[torch.randint(0, len(SPECIALS), (int(pick.sum()),), generator=g)]
    ids = torch.randint(0, 256, (rows, top_k), generator=g).to(id_dtype)
    masked = torch.rand((rows, top_k), generator=g) < masked_p
    ids[masked] = -1
    poison = torch.tensor([float("nan"), float("inf"), float("-inf")])
    pick = torch.randint(0, 3, (rows, top_k, hidden), generator=g)
    vals[masked] = poison[pick[masked]]
    terms = vals.to(BF16)
    if layout == "padded":  # row stride padded by 8 elements, slot stride padded by 8
        big = torch.zeros((rows, top_k, hidden + 8), dtype=BF16)
        big[:, :, :hidden] = terms
        big = big.to(device)
        return big[:, :, :hidden], ids.to(device)
    if layout == "offset1":  # storage offset of one element: never 16-byte aligned
        flat = torch.zeros(rows * top_k * hidden + 1, dtype=BF16)
        flat[1:] = terms.reshape(-1)
        return flat.to(device)[1:].view(rows, top_k, hidden), ids.to(device)
    return terms.to(device), ids.to(device)


@st.composite
def combine_cases(draw):
    hidden = draw(st.sampled_from(HIDDEN_SIZES))
    top_k = draw(st.integers(1, 16))
    rows = draw(st.integers(1, max(1, min(4096, MAX_ELEMS // (top_k * hidden)))))
    return dict(
        seed=draw(st.integers(0, 2**31 - 1)), rows=rows, top_k=top_k, hidden=hidden,
        num_tokens=draw(st.integers(0, rows)),
        masked_p=draw(st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.0])),
        id_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
        active_specials=draw(st.booleans()), layout=draw(st.sampled_from(LAYOUTS)),
    )


def _check_against_oracle(terms, ids, num_tokens, device, *, expect_plan=None):
    rows, _, hidden = terms.shape
    t0, i0 = terms.clone(), ids.clone()
    full = _poisoned(rows + 2, hidden, device)
    guard = full.clone()
    out = full[1 : rows + 1]
    plan = combine_plan(terms, ids, out, num_tokens)
    assert plan != PLAN_TORCH
    if expect_plan is not None:
        assert plan == expect_plan
    masked_combine(terms, ids, out, num_tokens, use_kernel=True)
    want = oracle_combine(terms[:num_tokens], ids[:num_tokens])
    assert_bits_equal(out[:num_tokens], want)
    assert_bits_equal(full[1 + num_tokens :], guard[1 + num_tokens :])  # rows >= T, guard
    assert_bits_equal(full[:1], guard[:1])
    assert_bits_equal(terms, t0)
    assert torch.equal(ids, i0)
    return plan


@pytest.mark.contract("s6.combine-slot-order", "s8.bitwise-stages", "s8.untouched-tail")
@given(case=combine_cases())
@pytest.mark.mega_sm107("sparse-decode")
def test_combine_kernel_equals_oracle_bitwise(cuda_device, case) -> None:
    terms, ids = _case(case["seed"], case["rows"], case["top_k"], case["hidden"],
                       case["masked_p"], case["id_dtype"], case["active_specials"],
                       case["layout"], cuda_device)
    _check_against_oracle(terms, ids, case["num_tokens"], cuda_device)


@pytest.mark.contract("s6.combine-slot-order")
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(("layout", "hidden", "plan"), [
    ("contig", 2880, PLAN_WIDE), ("padded", 136, PLAN_WIDE), ("offset1", 136, PLAN_SCALAR),
    ("contig", 3, PLAN_SCALAR),
])
def test_both_kernel_variants_run_and_match(cuda_device, id_dtype, layout, hidden, plan):
    terms, ids = _case(1, 300, 8, hidden, 0.4, id_dtype, True, layout, cuda_device)
    _check_against_oracle(terms, ids, 257, cuda_device, expect_plan=plan)


@pytest.mark.contract("s6.inactive-rows-zero")
@pytest.mark.mega_sm107("sparse-decode")
def test_all_masked_rows_are_exact_zero_despite_nan_terms(cuda_device) -> None:
    terms, ids = _case(2, 64, 8, 256, 1.0, torch.int32, True, "contig", cuda_device)
    assert bool(terms.isnan().any())
    out = _poisoned(64, 256, cuda_device)
    masked_combine(terms, ids, out, 64, use_kernel=True)
    assert bool((out.view(torch.int16) == 0).all()), "inactive rows must be +0.0 bytes"


@pytest.mark.contract("s6.combine-slot-order")
@pytest.mark.mega_sm107("sparse-decode")
def test_last_row_only_and_negative_zero_terms(cuda_device) -> None:
    rows, top_k, hidden = 129, 4, 64
    terms, ids = _case(3, rows, top_k, hidden, 0.0, torch.int64, False, "contig", cuda_device)
    ids[:-1] = -1
    terms[-1, :2] = -0.0  # two active -0.0 terms then two normal ones
    terms[-1, 2:, : hidden // 2] = -0.0  # half the columns: all four terms -0.0 -> +0.0
    _check_against_oracle(terms, ids, rows, cuda_device)
    out = _poisoned(rows, hidden, cuda_device)
    masked_combine(terms, ids, out, rows, use_kernel=True)
    assert bool((out[-1, : hidden // 2].view(torch.int16) == 0).all())


@pytest.mark.mega_sm107("sparse-decode")
def test_zero_tokens_writes_nothing(cuda_device) -> None:
    terms, ids = _case(4, 16, 2, 8, 0.0, torch.int32, False, "contig", cuda_device)
    out = _poisoned(16, 8, cuda_device)
    before = out.clone()
    masked_combine(terms, ids, out, 0, use_kernel=True)
    assert_bits_equal(out, before)


def test_planted_bug_adding_masked_slots_is_caught(cuda_device) -> None:
    """The kernel itself, fed ids with the masked slots turned active (the bug "adds masked
    slots"), gives NaN/Inf-polluted rows: the same comparison must flag it."""
    terms, ids = _case(5, 200, 6, 64, 0.5, torch.int32, False, "contig", cuda_device)
    want = oracle_combine(terms, ids)
    buggy_ids = torch.where(ids == -1, torch.zeros_like(ids), ids)
    out = torch.empty_like(want)
    masked_combine(terms, buggy_ids, out, 200, use_kernel=True)
    with pytest.raises(AssertionError):
        assert_bits_equal(out, want)
    masked_combine(terms, ids, out, 200, use_kernel=True)
    assert_bits_equal(out, want)


def _state(seed: int, rows: int, top_k: int, hidden: int, kind: str, device):
    terms, ids = _case(seed, rows, top_k, hidden, 0.3, torch.int32, True, "contig", device)
    if kind == "all_masked":
        ids.fill_(-1)
    elif kind == "last_row_only":
        ids[:-1] = -1
    elif kind == "dense":
        ids.clamp_(min=0)
    elif kind == "sparse_rows":
        empty = torch.rand(rows, generator=torch.Generator().manual_seed(seed)) < 0.5
        ids[empty.to(device)] = -1
    return terms, ids


@pytest.mark.contract("s9.replay-equals-eager", "s10.single-rank-replay")
@pytest.mark.parametrize(("rows", "num_tokens", "top_k", "hidden"),
                         [(4096, 4093, 8, 128), (300, 257, 4, 24), (129, 129, 16, 3)])
@pytest.mark.mega_sm107("graph-replay")
def test_combine_graph_replays_changing_contents_equal_eager(
    cuda_device, rows, num_tokens, top_k, hidden
) -> None:
    """One captured combine, contents changed in place between states (routes turning masked,
    rows emptied, NaN behind masked slots), the output poisoned between states, >= 17
    replays per state; first and last replay equal eager and the oracle, rows >= T keep the
    poison."""
    combine_warmup(cuda_device)
    terms = torch.zeros((rows, top_k, hidden), dtype=BF16, device=cuda_device)
    ids = torch.full((rows, top_k), -1, dtype=torch.int32, device=cuda_device)
    full = _poisoned(rows + 2, hidden, cuda_device)
    out = full[1 : rows + 1]
    masked_combine(terms, ids, out, num_tokens, use_kernel=True)  # eager warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        masked_combine(terms, ids, out, num_tokens, use_kernel=True)
    kinds = ("random", "all_masked", "last_row_only", "sparse_rows", "dense", "random")
    for i, kind in enumerate(kinds):
        new_terms, new_ids = _state(100 + i, rows, top_k, hidden, kind, cuda_device)
        terms.copy_(new_terms)
        ids.copy_(new_ids)
        full.view(torch.int16).fill_(POISON_BITS)
        eager = _poisoned(rows, hidden, cuda_device)
        masked_combine(terms.clone(), ids.clone(), eager, num_tokens, use_kernel=True)
        want = oracle_combine(terms[:num_tokens], ids[:num_tokens])
        assert_bits_equal(eager[:num_tokens], want)
        for replay in range(REPLAYS_PER_STATE):
            graph.replay()
            if replay in (0, REPLAYS_PER_STATE - 1):
                torch.cuda.synchronize()
                assert_bits_equal(out[:num_tokens], eager[:num_tokens])
                assert_bits_equal(out[:num_tokens], want)
                rest = full[1 + num_tokens :].view(torch.int16)
                assert bool((rest == POISON_BITS).all()), "rows >= T were written"
                assert bool((full[:1].view(torch.int16) == POISON_BITS).all())


@pytest.mark.sanitizer
@pytest.mark.parametrize(("hidden", "plan"), [(24, PLAN_WIDE), (23, PLAN_SCALAR)])
@pytest.mark.mega_sm107("sanitizer")
def test_sanitizer_case_combine_small(cuda_device, hidden, plan) -> None:
    """Designated small cases for the compute-sanitizer suite (one process per tool)."""
    terms, ids = _case(22, 37, 4, hidden, 0.4, torch.int32, True, "contig", cuda_device)
    _check_against_oracle(terms, ids, 30, cuda_device, expect_plan=plan)
