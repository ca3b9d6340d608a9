"""Changing routes on one captured graph per rank (docs/contract.md s9, s10), every rank
replaying in lockstep:

- the section 10 scenario set: at least 17 replays per state, NaN poured between states into
  every region a forward writes (staging, layout tables, receive buffers, terms, GEMM
  buffers; then a barrier so no peer pushes before the poison is in) and into the output
  before every replay; every replay's rows bitwise equal to the first replay's, which are
  bitwise equal to an eager EP forward and to EP1 and meet the collective oracle on every
  live row; rows past the live count untouched; ``restored`` equal to the first state;
- the sparse-to-dense pattern of the seed discussions: live counts ``(C, 0, 1, C)`` across
  ranks with every third route masked, then every route dense, then sparse again, checking
  the first and the 65th replay of each.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fixtures.scenarios import CHANGING_ROUTE_SEQUENCE, RESTORED_FROM
from megamoe.graphs import capture
from tests.layer_check import layer_routes
from tests.multi.ep_world import (
    OURS,
    RECIPES,
    CapturedLayer,
    Verdict,
    bits,
    build_layer,
    config,
    judge_first,
    oracle_outputs,
    shape_of,
    world_sequence,
)

REPLAYS_PER_STATE = 17
LONG_REPLAYS = 65
@pytest.mark.contract("s8.untouched-tail", "s9.replay-equals-eager", "s10.multi-rank-replay")
@pytest.mark.cuda_graphs
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.mega_sm107("graph-replay")
def test_changing_route_scenarios_replay_on_one_graph_per_rank(moe_backend, world, recipe) -> None:
    shape = shape_of(world)
    cl = CapturedLayer(moe_backend, world, config(shape, recipe), shape)
    v = Verdict()
    first_bits: dict[str, torch.Tensor] = {}
    try:
        states = world_sequence(world, shape, 5)
        assert [s.name for s in states] == list(CHANGING_ROUTE_SEQUENCE)
        for state in states:
            mine = state.ranks[world.rank]
            t = mine.num_tokens
            cl.load(mine.hidden, mine.topk_ids, mine.topk_weights, t)
            first = cl.replay()
            for rep in range(1, REPLAYS_PER_STATE):
                v.equal_bits(world.rank, f"{state.name}: replay {rep} vs replay 0", cl.replay(),
                             first)
            cl.layer.check_errors()  # no bad route, no timeout in any state
            want = oracle_outputs(cl.cfg, shape, [r.live() for r in state.ranks])[world.rank]
            judge_first(v, cl, f"{recipe} {state.name}", first, t, mine.live(), want)
            first_bits[state.name] = bits(first[:t])
        v.check(world.rank, "restored state differs from the first state",
                torch.equal(first_bits["restored"], first_bits[RESTORED_FROM]))
    finally:
        cl.destroy()
    v.assert_clean(world)


def _pattern_inputs(world, shape, dense: bool):  # type: ignore[no-untyped-def]
    """Every rank's live inputs: live counts ``(C, 0, 1, C)`` cycled over the ranks with every
    third route masked, or every rank ``C`` rows with every route active."""
    c = shape.capacity
    counts = [c] * world.size if dense else [(c, 0, 1, c)[r % 4] for r in range(world.size)]
    out = []
    for r, t in enumerate(counts):
        x, ids, w = layer_routes(1000 + r, t, num_experts=shape.experts, top_k=shape.top_k,
                                 hidden=shape.hidden, mask_p=0.0)
        if not dense:
            third = (torch.arange(ids.numel()) % 3 == 2).view(ids.shape)
            ids = torch.where(third, -1, ids)
            w = torch.where(third, float("nan"), w)
        out.append((x, ids, w))
    return out


@pytest.mark.contract("s9.replay-equals-eager", "s10.multi-rank-replay")
@pytest.mark.cuda_graphs
@pytest.mark.parametrize("late", [False, True])
@pytest.mark.mega_sm107("graph-replay")
def test_sparse_to_dense_and_back_on_one_graph_first_and_65th_replay(moe_backend, world,
                                                                     late) -> None:
    shape = shape_of(world)
    cl = CapturedLayer(moe_backend, world, config(shape, "mxfp8", late_weighting=late), shape)
    v = Verdict()
    c = shape.capacity
    try:
        for phase, dense in (("sparse", False), ("dense", True), ("sparse again", False)):
            inputs = _pattern_inputs(world, shape, dense)
            x, ids, w = inputs[world.rank]
            t = x.shape[0]
            pad = c - t
            cl.load(torch.cat([x, torch.full((pad, shape.hidden), float("nan")).bfloat16()]),
                    torch.cat([ids, torch.full((pad, shape.top_k), 2**40)]),
                    torch.cat([w, torch.full((pad, shape.top_k), float("inf"))]), t)
            first = cl.replay()
            last = first
            for _ in range(1, LONG_REPLAYS):
                last = cl.replay()
            cl.layer.check_errors()
            v.equal_bits(world.rank, f"{phase}: replay {LONG_REPLAYS} vs replay 1", last, first)
            want = oracle_outputs(cl.cfg, shape, inputs)[world.rank]
            judge_first(v, cl, f"late={late} {phase}", first, t, (x, ids, w), want)
    finally:
        cl.destroy()
    v.assert_clean(world)


SANITIZER_STATES = ("dense-C", "sparse-holes", "asymmetric", "empty-rank", "restored")


@pytest.mark.sanitizer
@pytest.mark.cuda_graphs
@pytest.mark.parametrize("recipe", ["bf16", "fp8_mxfp4"])
def test_sanitizer_case_changing_routes_small(moe_backend, world, recipe) -> None:
    """The designated case of ``qualify.py --suite multi --sanitizer-tool T``: a small
    capacity, five changing states on one graph per rank, three replays each, every live row
    against EP1's bits (every rank's process runs under the tool)."""
    shape = dataclasses.replace(shape_of(world), capacity=16)
    cl = CapturedLayer(moe_backend, world, config(shape, recipe), shape)
    v = Verdict()
    try:
        states = {s.name: s for s in world_sequence(world, shape, 7)}
        for name in SANITIZER_STATES:
            mine = states[name].ranks[world.rank]
            cl.load(mine.hidden, mine.topk_ids, mine.topk_weights, mine.num_tokens)
            outs = [cl.replay() for _ in range(3)]
            cl.layer.check_errors()
            x, ids, w = (a.to(world.device) for a in mine.live())
            want = cl.ep1.forward(x, ids, w)
            for i, out in enumerate(outs):
                v.equal_bits(world.rank, f"{recipe} {name} replay {i} vs EP1",
                             out[: mine.num_tokens], want)
    finally:
        cl.destroy()
    v.assert_clean(world)


@pytest.mark.contract("s2.masked-any-score", "s8.invariance")
@pytest.mark.cuda_graphs
@pytest.mark.parametrize("checks", ["1", "0"])
def test_masked_slot_contents_never_change_a_replayed_bit(moe_backend, world, monkeypatch,
                                                          checks) -> None:
    """docs/contract.md s2, s6, s9: NaN, +-Inf, the router's score or 0 behind masked ids, changed
    in place between replays, give the same output bits (checks read at capture)."""
    from megamoe.route_check_setting import ENV_VAR

    monkeypatch.setenv(ENV_VAR, checks)
    shape = shape_of(world)
    cl = CapturedLayer(moe_backend, world, config(shape, "fp8_mxfp4"), shape)
    v = Verdict()
    try:
        state = world_sequence(world, shape, 43)[3]  # sparse-holes
        mine = state.ranks[world.rank]
        masked = mine.topk_ids == -1
        router = torch.rand(mine.topk_weights.shape, generator=torch.Generator().manual_seed(3))
        ref = None
        for content in (float("nan"), float("inf"), float("-inf"), 0.0, "router"):
            fill = router if content == "router" else torch.full_like(router, content)
            cl.load(mine.hidden, mine.topk_ids, torch.where(masked, fill, mine.topk_weights),
                    mine.num_tokens)
            out = cl.replay()
            cl.layer.check_errors()
            if ref is None:
                ref = out
            v.equal_bits(world.rank, f"checks={checks} masked={content}",
                         out[: mine.num_tokens], ref[: mine.num_tokens])
    finally:
        cl.destroy()
    v.assert_clean(world)


@pytest.mark.contract("s2.route-error-graph", "s7.bad-route-no-hang")
@pytest.mark.cuda_graphs
def test_a_bad_route_on_one_rank_under_graphs_marks_its_row_only(moe_backend, world) -> None:
    """docs/contract.md s2, s7: a bad route on one rank, written into a replayed graph's inputs:
    every rank completes every replay; that rank's bad row is NaN, its status word makes
    ``check_errors`` raise ``RouteError``; every other row of every rank is unchanged."""
    from megamoe import RouteError
    from oracle.routing import find_route_violations

    shape = shape_of(world)
    cl = CapturedLayer(moe_backend, world, config(shape, "bf16"), shape)
    v = Verdict()
    bad_rank, bad_row = world.size - 1, 2
    try:
        state = world_sequence(world, shape, 47)[7]  # dense-C
        mine = state.ranks[world.rank]
        t = mine.num_tokens
        cl.load(mine.hidden, mine.topk_ids, mine.topk_weights, t)
        clean = cl.replay()
        cl.layer.check_errors()
        ids = mine.topk_ids.clone()
        if world.rank == bad_rank:
            ids[bad_row, 0] = shape.experts + 1
        cl.load(mine.hidden, ids, mine.topk_weights, t)
        out = cl.replay()
        keep = torch.arange(shape.capacity) != bad_row
        if world.rank == bad_rank:
            v.check(world.rank, "the bad row is not NaN", bool(out[bad_row].isnan().all()))
            v.equal_bits(world.rank, "rows beside the bad one", out[:t][keep[:t]],
                         clean[:t][keep[:t]])
            first = find_route_violations(ids[:t], mine.topk_weights[:t], shape.experts)[0]
            try:
                cl.layer.check_errors()
                v.check(world.rank, "check_errors did not raise", False)
            except RouteError as err:
                v.check(world.rank, f"check_errors named {err}, not {first}",
                        (err.row, err.slot, err.rule) == (first.row, first.slot, first.rule))
        else:
            v.equal_bits(world.rank, "a good rank's rows", out[:t], clean[:t])
            cl.layer.check_errors()
    finally:
        cl.destroy()
    v.assert_clean(world)


@pytest.mark.contract("s7.bounded-waits")
@pytest.mark.cuda_graphs
def test_teardown_with_live_graphs_ends_in_bounded_time(world) -> None:
    """docs/contract.md s7: ``destroy()`` of the layer and of its world while a captured graph
    still exists (never replayed again) frees every rank's symmetric memory at once."""
    import time

    from tests.multi.ep_world import short_timeout_world

    shape = shape_of(world)
    sub = short_timeout_world(world, 30.0)
    cfg = config(shape, "bf16")
    layer = build_layer(OURS, cfg, sub, shape, world.device)
    x = torch.randn(4, shape.hidden, dtype=torch.bfloat16, device=world.device)
    ids = torch.arange(4 * shape.top_k, device=world.device).view(4, -1) % shape.experts
    w = torch.full((4, shape.top_k), 0.5, device=world.device)
    layer.warmup(x, ids, w)
    torch.cuda.synchronize(world.device)
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        layer.forward(x, ids, w)
    graph.replay()
    torch.cuda.synchronize(world.device)
    t0 = time.monotonic()
    layer.destroy()
    sub.destroy()
    took = time.monotonic() - t0
    v = Verdict()
    v.check(world.rank, f"destroy with a live graph took {took:.1f} s", took < 20.0)
    v.check(world.rank, "symmetric buffers left", sub.live_buffers == 0)
    del graph
    v.assert_clean(world)
