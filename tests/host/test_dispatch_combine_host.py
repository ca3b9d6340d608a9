"""Host (CPU) tests of the dispatch-layout and masked-combine launchers (docs/contract.md s3, s6, s8).

The CPU runs the Torch paths of ``megamoe.dispatch`` / ``megamoe.combine``; they must equal the
oracle bitwise. The kernel paths are covered on the GPU by tests/single; their offline
compile by the compile gate. Here also: metadata errors, guard bytes of the layout
workspace, caller tensors left alone, constants kept in step with the kernel modules, and
planted bugs that the comparisons must catch.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from megamoe.combine import PLAN_TORCH, combine_plan, masked_combine
from megamoe.dispatch import PATH_TORCH, LayoutShape, LayoutWorkspace, dispatch_layout
from megamoe.errors import ConfigError
from oracle.combine import masked_combine as oracle_combine
from oracle.routing import dispatch_layout as oracle_layout

LAYOUT_FIELDS = (
    "counts", "expert_counts", "rank_counts", "expert_offsets", "order", "order_expert",
    "active_extent",
)
PATTERN = 0xA5


def _random_staged(seed: int, world: int, capacity: int, top_k: int, num_experts: int,
                   masked_p: float, odd_ids: bool) -> list[torch.Tensor]:
    """Per-rank staged ids int32 [C, K]: live rows random ids (duplicates allowed), masked
    slots -1, rows >= T all -1; with ``odd_ids`` some ids outside [0, E) (never counted)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(world):
        live = int(torch.randint(0, capacity + 1, (1,), generator=g))
        ids = torch.randint(0, num_experts, (capacity, top_k), generator=g, dtype=torch.int32)
        masked = torch.rand((capacity, top_k), generator=g) < masked_p
        ids[masked] = -1
        if odd_ids:
            odd = torch.rand((capacity, top_k), generator=g) < 0.1
            choices = torch.tensor([-2, num_experts, num_experts + 7, -(2**31)], dtype=torch.int32)
            ids[odd] = choices[torch.randint(0, 4, (int(odd.sum()),), generator=g)]
        ids[live:] = -1
        out.append(ids)
    return out


def assert_layout_equal(got, want) -> None:
    """Bitwise equality of every layout field (dtype, shape, values)."""
    for name in LAYOUT_FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, a.shape, b.dtype, b.shape)
        assert torch.equal(a.cpu(), b.cpu()), f"{name} differs"


def assert_bits_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal bytes (NaN payloads and signed zeros included)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.contract("s8.bitwise-stages")
@given(
    seed=st.integers(0, 2**31 - 1),
    world=st.integers(1, 4),
    capacity=st.integers(1, 40),
    top_k=st.integers(1, 6),
    local_experts=st.integers(1, 6),
    masked_p=st.sampled_from([0.0, 0.3, 0.9, 1.0]),
    odd_ids=st.booleans(),
)
def test_torch_layout_equals_oracle_bitwise(
    seed, world, capacity, top_k, local_experts, masked_p, odd_ids
) -> None:
    experts = world * local_experts
    ranks = _random_staged(seed, world, capacity, top_k, experts, masked_p, odd_ids)
    before = [r.clone() for r in ranks]
    got = dispatch_layout(ranks, experts, world)
    assert got.path == PATH_TORCH
    assert_layout_equal(got.trimmed(), oracle_layout(ranks, experts, world))
    for r, b in zip(ranks, before, strict=True):
        assert torch.equal(r, b), "caller ids were modified"


def test_stacked_and_list_inputs_give_the_same_layout() -> None:
    ranks = _random_staged(3, 3, 17, 4, 9, 0.3, True)
    a = dispatch_layout(ranks, 9, 3).trimmed()
    b = dispatch_layout(torch.stack(ranks), 9, 3).trimmed()
    assert_layout_equal(a, b)
    # non-contiguous [P, C, K] view (every other row of a larger buffer)
    big = torch.full((3, 34, 4), 5, dtype=torch.int32)
    big[:, ::2] = torch.stack(ranks)
    c = dispatch_layout(big[:, ::2], 9, 3).trimmed()
    assert_layout_equal(c, a)


def test_layout_writes_only_its_regions_and_not_order_beyond_n() -> None:
    ranks = _random_staged(11, 2, 9, 3, 4, 0.5, False)
    ws = LayoutWorkspace(LayoutShape(2, 9, 3, 4), "cpu")
    ws.buffer.fill_(PATTERN)
    res = dispatch_layout(ranks, 4, 2, workspace=ws)
    n = int(res.num_routes[0])
    written = torch.zeros_like(ws.buffer, dtype=torch.bool)
    for name, (off, nbytes) in ws.regions().items():
        if name in ("order", "order_expert"):
            nbytes = nbytes * n // ws.shape.slots
        if name in ("counts", "expert_counts", "rank_counts", "expert_offsets",
                    "active_extent", "num_routes", "order", "order_expert", "stacked_ids"):
            written[off : off + nbytes] = True
    assert bool((ws.buffer[~written] == PATTERN).all()), "bytes outside the outputs changed"
    assert_layout_equal(res.trimmed(), oracle_layout(ranks, 4, 2))


def test_planted_layout_bugs_are_caught() -> None:
    ranks = _random_staged(5, 2, 12, 3, 6, 0.2, True)
    want = oracle_layout(ranks, 6, 2)
    good = dispatch_layout(ranks, 6, 2).trimmed()
    assert_layout_equal(good, want)
    # 1) counting out-of-range ids as active (a wrong activity rule: "only -1 is masked")
    wide = [torch.where((r != -1) & ((r < 0) | (r >= 6)), torch.zeros_like(r), r) for r in ranks]
    assert not all(torch.equal(a, b) for a, b in zip(wide, ranks, strict=True))
    with pytest.raises(AssertionError):
        assert_layout_equal(dispatch_layout(wide, 6, 2).trimmed(), want)
    # 2) an unstable order: two entries of the same expert swapped
    order = good.order.clone()
    e = good.order_expert
    same = (e[1:] == e[:-1]).nonzero()
    assert same.numel() > 0
    i = int(same[0])
    order[[i, i + 1]] = order[[i + 1, i]]
    with pytest.raises(AssertionError):
        assert_layout_equal(replace(good, order=order), want)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: dispatch_layout([torch.zeros(4, 2, dtype=torch.int64)], 4, 1), "staged_ids[0]"),
        (lambda: dispatch_layout([torch.zeros(4, 2, dtype=torch.int32)] * 2, 3, 2), "num_experts"),
        (lambda: dispatch_layout([torch.zeros(4, 2, dtype=torch.int32)], 4, 2), "staged_ids"),
        (lambda: dispatch_layout(
            [torch.zeros(4, 2, dtype=torch.int32), torch.zeros(5, 2, dtype=torch.int32)], 4, 2),
         "staged_ids[1]"),
        (lambda: dispatch_layout(torch.zeros(4, 2, dtype=torch.int32), 4, 2), "staged_ids"),
        (lambda: dispatch_layout(torch.zeros(4, 2, dtype=torch.int32), 0, 1), "num_experts"),
        (lambda: dispatch_layout(torch.zeros(4, 2, dtype=torch.int32), 4, 1, use_kernel=True),
         "use_kernel"),
        (lambda: dispatch_layout(
            torch.zeros(4, 2, dtype=torch.int32), 4, 1,
            workspace=LayoutWorkspace(LayoutShape(1, 5, 2, 4), "cpu")), "workspace"),
    ],
)
def test_layout_metadata_errors_name_the_argument(call, argument) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.argument == argument


# ---------------------------------------------------------------- combine


def _combine_case(seed: int, rows: int, top_k: int, hidden: int, masked_p: float,
                  id_dtype: torch.dtype):
    g = torch.Generator().manual_seed(seed)
    terms = (torch.randn((rows, top_k, hidden), generator=g) * 4).to(torch.bfloat16)
    ids = torch.randint(0, 64, (rows, top_k), generator=g).to(id_dtype)
    masked = torch.rand((rows, top_k), generator=g) < masked_p
    ids[masked] = -1
    poison = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=torch.bfloat16)
    pick = torch.randint(0, 3, (rows, top_k, hidden), generator=g)
    terms[masked] = poison[pick[masked]]
    return terms, ids


@pytest.mark.contract("s6.combine-slot-order", "s6.inactive-rows-zero", "s8.untouched-tail")
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 24),
    top_k=st.integers(1, 8),
    hidden=st.sampled_from([1, 3, 8, 24]),
    masked_p=st.sampled_from([0.0, 0.5, 1.0]),
    id_dtype=st.sampled_from([torch.int32, torch.int64]),
    data=st.data(),
)
def test_torch_combine_equals_oracle_bitwise_and_leaves_rows_beyond_t(
    seed, rows, top_k, hidden, masked_p, id_dtype, data
) -> None:
    num_tokens = data.draw(st.integers(0, rows))
    terms, ids = _combine_case(seed, rows, top_k, hidden, masked_p, id_dtype)
    t0, i0 = terms.clone(), ids.clone()
    out = torch.full((rows + 2, hidden), float("nan"), dtype=torch.bfloat16)
    guard = out.clone()
    assert combine_plan(terms, ids, out[1 : rows + 1], num_tokens) == PLAN_TORCH
    masked_combine(terms, ids, out[1 : rows + 1], num_tokens)
    want = oracle_combine(terms[:num_tokens], ids[:num_tokens])
    assert_bits_equal(out[1 : 1 + num_tokens], want)
    assert_bits_equal(out[1 + num_tokens :], guard[1 + num_tokens :])
    assert_bits_equal(out[:1], guard[:1])
    assert_bits_equal(terms, t0)
    assert torch.equal(ids, i0)


@pytest.mark.contract("s6.combine-slot-order")
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_torch_combine_adds_active_slots_in_slot_order_from_positive_zero(id_dtype) -> None:  # type: ignore[no-untyped-def]
    # Random bf16 terms rarely tell summation orders apart (their float32 sums are mostly
    # exact), so the order is pinned by hand. Row 0, in slot order: 0 + 1 = 1; 1 + 2**-24 is
    # a float32 tie -> 1 (twice); 1 + 2**-8 is exact, a bf16 tie -> 1.0. Summed last slot
    # first it would be 2**-8 + 2**-23 + 1, exact in float32, above the bf16 tie -> 1 + 2**-7.
    # Row 1 is row 0's slots reversed: 1 + 2**-8 + 2**-23 in slot order -> 1 + 2**-7. Row 2
    # is row 0 with a masked NaN slot in between, which must neither add nor break the order.
    a, b, c = 2.0**-24, 2.0**-8, float("nan")
    terms = torch.tensor([[[1.0], [a], [a], [b], [0.0]],
                          [[b], [a], [a], [1.0], [0.0]],
                          [[1.0], [c], [a], [a], [b]]], dtype=torch.bfloat16)
    ids = torch.tensor([[0, 1, 2, 3, -1], [0, 1, 2, 3, -1], [4, -1, 5, 6, 7]], dtype=id_dtype)
    want = torch.tensor([[1.0], [1.0 + 2**-7], [1.0]], dtype=torch.bfloat16)
    out = torch.full((3, 1), float("nan"), dtype=torch.bfloat16)
    assert combine_plan(terms, ids, out, 3) == PLAN_TORCH
    masked_combine(terms, ids, out, 3)
    assert_bits_equal(out, want)
    assert_bits_equal(oracle_combine(terms, ids), want)  # the oracle keeps the order too


def test_planted_combine_bug_adding_masked_slots_is_caught() -> None:
    terms, ids = _combine_case(7, 16, 4, 8, 0.5, torch.int32)
    want = oracle_combine(terms, ids)
    buggy = terms.float().sum(dim=1).to(torch.bfloat16)  # adds masked slots too
    with pytest.raises(AssertionError):
        assert_bits_equal(buggy, want)
    out = torch.empty_like(want)
    masked_combine(terms, ids, out, 16)
    assert_bits_equal(out, want)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"terms": torch.zeros(4, 2, 8)}, "terms"),
        ({"terms": torch.zeros(4, 8, dtype=torch.bfloat16)}, "terms"),
        ({"ids": torch.zeros(4, 2, dtype=torch.int16)}, "ids"),
        ({"ids": torch.zeros(4, 3, dtype=torch.int32)}, "ids"),
        ({"ids": torch.zeros(2, 2, dtype=torch.int32)}, "ids"),
        ({"out": torch.zeros(4, 8)}, "out"),
        ({"out": torch.zeros(4, 7, dtype=torch.bfloat16)}, "out"),
        ({"out": torch.zeros(2, 8, dtype=torch.bfloat16)}, "out"),
        ({"num_tokens": -1}, "num_tokens"),
        ({"num_tokens": True}, "num_tokens"),
        ({"terms": torch.zeros(4, 2, 16, dtype=torch.bfloat16)[:, :, ::2]}, "terms/out"),
        ({"use_kernel": True}, "use_kernel"),
    ],
)
def test_combine_metadata_errors_name_the_argument(kwargs, argument) -> None:
    args = {
        "terms": torch.zeros(4, 2, 8, dtype=torch.bfloat16),
        "ids": torch.zeros(4, 2, dtype=torch.int32),
        "out": torch.zeros(4, 8, dtype=torch.bfloat16),
        "num_tokens": 3,
    }
    args.update(kwargs)
    out_before = args["out"].clone()
    with pytest.raises(ConfigError) as info:
        masked_combine(**args)
    assert info.value.argument == argument
    assert torch.equal(args["out"], out_before)


def test_launcher_constants_match_the_kernel_modules() -> None:
    from megamoe.combine import api as combine_api
    from megamoe.combine import combine_kernel
    from megamoe.dispatch import api as dispatch_api
    from megamoe.dispatch import layout_kernel

    assert dispatch_api.E_CAP == layout_kernel.E_CAP
    assert dispatch_api.TILE == layout_kernel.TILE
    assert dispatch_api.tiles_per_rank(4096, 16) == layout_kernel.tiles_per_rank(4096, 16)
    assert combine_api.VEC_WIDE == combine_kernel.VEC_WIDE
    assert combine_api.THREADS == combine_kernel.THREADS
    for vec in (combine_api.VEC_WIDE, 1):
        assert combine_kernel.pointer_align(vec) == 2 * vec


@pytest.mark.parametrize(("world", "capacity", "top_k", "plan"), [
    (1, 1, 1, "one-launch"), (1, 256, 8, "one-launch"), (1, 2048, 1, "one-launch"),
    (1, 257, 8, "four-launches"), (1, 2049, 1, "four-launches"), (2, 1, 1, "four-launches"),
])
def test_one_rank_with_at_most_a_tile_of_slots_takes_the_one_launch_kernel(world, capacity,
                                                                          top_k, plan) -> None:
    """``kernel_plan``: fixed by the shape (one rank, ``C*K <= TILE``), never by the ids."""
    from megamoe.dispatch import LayoutShape, kernel_plan
    from megamoe.dispatch.api import TILE

    assert TILE == 2048
    assert kernel_plan(LayoutShape(world, capacity, top_k, 2 * world)) == plan
