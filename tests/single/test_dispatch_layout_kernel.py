"""Dispatch-layout kernel on the GPU vs the oracle, bitwise (docs/contract.md s3, s8, s9, s10).

Every comparison runs the oracle (``oracle.routing.dispatch_layout``) on the same device and
compares every field with ``torch.equal`` (int64 tensors: equal values are equal bytes).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fixtures.scenarios import make_sequence
from megamoe.dispatch import (
    PATH_KERNEL,
    PLAN_FOUR_LAUNCHES,
    PLAN_ONE_LAUNCH,
    LayoutShape,
    LayoutWorkspace,
    dispatch_layout,
    kernel_plan,
    warmup,
)
from megamoe.graphs import capture
from oracle.routing import dispatch_layout as oracle_layout
from oracle.routing import stage_routes
from tests.host.test_dispatch_combine_host import PATTERN, assert_layout_equal

REPLAYS_PER_STATE = 17
PATTERNS = ("random", "all_masked", "last_row_only", "empty_ranks", "dense", "skewed")
SCRATCH_REGIONS = ("tile_counts", "tile_base", "tile_ext")


def _staged(seed: int, world: int, capacity: int, top_k: int, experts: int, pattern: str,
            masked_p: float, odd_ids: bool) -> list[torch.Tensor]:
    """Per-rank staged ids int32 [C, K] on the CPU for one named pattern."""
    g = torch.Generator().manual_seed(seed)
    out = []
    hot = int(torch.randint(0, experts, (1,), generator=g))
    empty = torch.rand(world, generator=g) < 0.5
    for r in range(world):
        ids = torch.randint(0, experts, (capacity, top_k), generator=g, dtype=torch.int32)
        if pattern == "random":
            live = int(torch.randint(0, capacity + 1, (1,), generator=g))
            ids[torch.rand((capacity, top_k), generator=g) < masked_p] = -1
            ids[live:] = -1
        elif pattern == "all_masked":
            ids.fill_(-1)
        elif pattern == "last_row_only":
            ids[:-1] = -1
        elif pattern == "empty_ranks":
            if bool(empty[r]) or r == 0:
                ids.fill_(-1)
        elif pattern == "skewed":
            ids.fill_(-1)
            ids[:, int(torch.randint(0, top_k, (1,), generator=g))] = hot
        if odd_ids:
            odd = torch.rand((capacity, top_k), generator=g) < 0.05
            choices = torch.tensor([-2, experts, experts + 5, 2**31 - 1, -(2**31)],
                                   dtype=torch.int32)
            ids[odd] = choices[torch.randint(0, 5, (int(odd.sum()),), generator=g)]
        out.append(ids)
    return out


@st.composite
def layout_cases(draw):
    world = draw(st.integers(1, 8))
    local = draw(st.integers(1, 256 // world))
    capacity = draw(st.one_of(st.integers(1, 300), st.sampled_from([2047, 2048, 2049, 4096])))
    top_k = draw(st.integers(1, 16))
    return dict(
        seed=draw(st.integers(0, 2**31 - 1)), world=world, capacity=capacity, top_k=top_k,
        experts=world * local, pattern=draw(st.sampled_from(PATTERNS)),
        masked_p=draw(st.sampled_from([0.0, 0.3, 0.9, 1.0])), odd_ids=draw(st.booleans()),
        stacked=draw(st.booleans()),
    )


@pytest.mark.contract("s8.bitwise-stages")
@given(case=layout_cases())
@pytest.mark.mega_sm107("sparse-decode")
def test_layout_kernel_equals_oracle_bitwise(cuda_device, case) -> None:
    ranks = [
        r.to(cuda_device)
        for r in _staged(case["seed"], case["world"], case["capacity"], case["top_k"],
                         case["experts"], case["pattern"], case["masked_p"], case["odd_ids"])
    ]
    before = [r.clone() for r in ranks]
    arg = torch.stack(ranks) if case["stacked"] else ranks
    got = dispatch_layout(arg, case["experts"], case["world"], use_kernel=True)
    assert got.path == PATH_KERNEL
    want = oracle_layout(ranks, case["experts"], case["world"])
    assert_layout_equal(got.trimmed(), want)
    for r, b in zip(ranks, before, strict=True):
        assert torch.equal(r, b), "caller ids were modified"


@pytest.mark.parametrize(
    ("world", "capacity", "top_k", "experts", "pattern"),
    [
        (8, 4096, 16, 256, "random"),
        (8, 4096, 16, 256, "dense"),
        (1, 4096, 8, 256, "last_row_only"),
        (4, 4096, 4, 128, "all_masked"),
        (8, 1000, 6, 8, "empty_ranks"),
        (2, 3000, 16, 1024, "random"),
        (1, 1, 1, 1, "dense"),
        (3, 700, 5, 3, "skewed"),
        (1, 256, 8, 256, "random"),  # one launch from here: one rank, C*K <= 2048
        (1, 256, 8, 256, "dense"),
        (1, 2048, 1, 1024, "skewed"),
        (1, 128, 16, 7, "last_row_only"),
        (1, 2, 8, 1024, "all_masked"),
    ],
)
@pytest.mark.mega_sm107("sparse-decode")
def test_layout_kernel_named_cases(cuda_device, world, capacity, top_k, experts, pattern):
    plan = kernel_plan(LayoutShape(world, capacity, top_k, experts))
    assert plan == (PLAN_ONE_LAUNCH if world == 1 and capacity * top_k <= 2048
                    else PLAN_FOUR_LAUNCHES)
    ranks = [r.to(cuda_device)
             for r in _staged(17, world, capacity, top_k, experts, pattern, 0.3, True)]
    got = dispatch_layout(ranks, experts, world, use_kernel=True)
    assert got.path == PATH_KERNEL
    assert_layout_equal(got.trimmed(), oracle_layout(ranks, experts, world))


@pytest.mark.parametrize(("world", "capacity", "top_k", "experts"),
                         [(3, 777, 5, 12), (1, 250, 8, 12)], ids=["four-launches", "one-launch"])
@pytest.mark.mega_sm90_mxfp4("guard-bytes")
def test_layout_kernel_writes_no_byte_outside_its_regions(cuda_device, world, capacity, top_k,
                                                          experts) -> None:
    ranks = [r.to(cuda_device)
             for r in _staged(5, world, capacity, top_k, experts, "random", 0.4, True)]
    ws = LayoutWorkspace(LayoutShape(world, capacity, top_k, experts), cuda_device)
    ws.buffer.fill_(PATTERN)
    res = dispatch_layout(torch.stack(ranks), experts, world, workspace=ws, use_kernel=True)
    n = int(res.num_routes[0])
    assert 0 < n < ws.shape.slots
    allowed = torch.zeros(ws.buffer.numel(), dtype=torch.bool, device=cuda_device)
    for name, (off, nbytes) in ws.regions().items():
        if name == "stacked_ids":
            continue  # [P, C, K] input is read in place: this region stays untouched
        if name in ("order", "order_expert"):
            nbytes = nbytes * n // ws.shape.slots  # rows >= N are never written
        allowed[off : off + nbytes] = True
    assert bool((ws.buffer[~allowed] == PATTERN).all()), "a byte outside the outputs changed"
    assert_layout_equal(res.trimmed(), oracle_layout(ranks, experts, world))


@pytest.mark.parametrize("world", [2, 1], ids=["four-launches", "one-launch"])
def test_planted_unstable_order_is_caught_on_kernel_output(cuda_device, world) -> None:
    ranks = [r.to(cuda_device) for r in _staged(9, world, 64, 4, 4, "dense", 0.0, False)]
    got = dispatch_layout(ranks, 4, world, use_kernel=True).trimmed()
    want = oracle_layout(ranks, 4, world)
    assert_layout_equal(got, want)
    order = got.order.clone()
    order[[0, 1]] = order[[1, 0]]  # same expert (dense: expert 0 has many entries), swapped
    assert int(got.order_expert[0]) == int(got.order_expert[1])
    with pytest.raises(AssertionError):
        assert_layout_equal(replace(got, order=order), want)


def _stage_state(state, capacity: int, device) -> list[torch.Tensor]:
    staged = []
    for rank in state.ranks:
        _, ids, w = rank.live()
        s_ids, _ = stage_routes(ids, w, capacity)
        staged.append(s_ids.to(device))
    return staged


@pytest.mark.contract("s9.replay-equals-eager", "s10.single-rank-replay")
@pytest.mark.parametrize(
    ("world", "capacity", "top_k", "experts"),
    [(1, 4096, 8, 128), (4, 300, 4, 32), (8, 160, 16, 64), (1, 256, 8, 256)],
)
@pytest.mark.mega_sm107("graph-replay")
def test_layout_graph_replays_changing_routes_equal_eager_and_oracle(
    cuda_device, world, capacity, top_k, experts
) -> None:
    """docs/contract.md s9/s10: one captured graph, the scenario sequence, >= 17 replays per state,
    the workspace poisoned between states, first and last replay compared in full."""
    warmup(cuda_device)
    states = make_sequence(world_size=world, capacity=capacity, top_k=top_k,
                           num_experts=experts, hidden_size=8, seed=2024)
    static = [torch.full((capacity, top_k), -1, dtype=torch.int32, device=cuda_device)
              for _ in range(world)]
    shape = LayoutShape(world, capacity, top_k, experts)
    ws = LayoutWorkspace(shape, cuda_device)
    eager_ws = LayoutWorkspace(shape, cuda_device)
    arg = static[0] if world == 1 else static
    dispatch_layout(arg, experts, world, workspace=ws, use_kernel=True)  # warm, eager
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        captured = dispatch_layout(arg, experts, world, workspace=ws, use_kernel=True)
    for state in states:
        for dst, src in zip(static, _stage_state(state, capacity, cuda_device), strict=True):
            dst.copy_(src)
        ws.buffer.fill_(0x7F)  # poison every output and scratch byte between states
        eager = dispatch_layout([s.clone() for s in static], experts, world,
                                workspace=eager_ws, use_kernel=True).trimmed()
        want = oracle_layout(static, experts, world)
        assert_layout_equal(eager, want)
        for replay in range(REPLAYS_PER_STATE):
            graph.replay()
            if replay in (0, REPLAYS_PER_STATE - 1):
                torch.cuda.synchronize()
                got = captured.trimmed()
                assert_layout_equal(got, eager)
                assert_layout_equal(got, want)


@pytest.mark.sanitizer
@pytest.mark.mega_sm107("sanitizer")
def test_sanitizer_case_layout_small(cuda_device) -> None:
    """Designated small case for the compute-sanitizer suite (one process per tool)."""
    world, capacity, top_k, experts = 3, 300, 5, 12
    ranks = [r.to(cuda_device)
             for r in _staged(21, world, capacity, top_k, experts, "random", 0.3, True)]
    got = dispatch_layout(ranks, experts, world, use_kernel=True)
    assert got.path == PATH_KERNEL
    assert_layout_equal(got.trimmed(), oracle_layout(ranks, experts, world))


@pytest.mark.sanitizer
def test_sanitizer_case_layout_one_launch(cuda_device) -> None:
    """Designated small case of the one-launch layout (one rank, C*K <= 2048)."""
    capacity, top_k, experts = 200, 8, 64
    assert kernel_plan(LayoutShape(1, capacity, top_k, experts)) == PLAN_ONE_LAUNCH
    ids = _staged(22, 1, capacity, top_k, experts, "random", 0.3, True)[0].to(cuda_device)
    got = dispatch_layout(ids, experts, 1, use_kernel=True)
    assert got.path == PATH_KERNEL
    assert_layout_equal(got.trimmed(), oracle_layout([ids], experts, 1))
