"""A bad route on one rank hangs nobody (docs/contract.md s2, s7): every rank completes the
step; the bad rank's eager forward raises ``RouteError`` naming the first bad (row, slot,
id, rule) after the step and writes nothing the caller owns (its bad row is NaN in the
layer's own buffer); every other rank's rows are exactly what they are without the bad
route (EP1 bits of the same rows)."""

from __future__ import annotations

import pytest
import torch

from megamoe import RouteError
from oracle.routing import find_route_violations
from tests.multi.ep_world import (
    OURS,
    Verdict,
    bits,
    build_layer,
    config,
    rank_inputs,
    shape_of,
    world_scenario,
)

BAD_ROW = 3


@pytest.mark.contract("s2.route-error-eager", "s7.bad-route-no-hang")
@pytest.mark.parametrize("recipe", ["bf16", "nvfp4"])
def test_a_bad_route_on_one_rank_fails_that_rank_only(world, recipe) -> None:
    """Our layer (it reads the layer's own output buffer for the bad row's NaN)."""
    shape = shape_of(world)
    cfg = config(shape, recipe)
    layer = build_layer(OURS, cfg, world, shape, world.device)
    ep1 = build_layer(OURS, cfg, None, shape, world.device)
    bad_rank = world.size - 1
    verdict = Verdict()
    try:
        state = world_scenario(world, shape, "dense-C", 31)
        x, ids, w = rank_inputs(state.ranks[world.rank], world.device)
        layer.warmup(x, ids, w)
        clean = ep1.warmup(x, ids, w)
        if world.rank == bad_rank:
            ids = ids.clone()
            ids[BAD_ROW, 1] = shape.experts + 5
        out = torch.full((x.shape[0], shape.hidden), 3.0, dtype=torch.bfloat16,
                         device=world.device)
        sentinel = bits(out)
        try:
            layer.forward(x, ids, w, out=out)
            raised = None
        except RouteError as err:
            raised = err
        if world.rank == bad_rank:
            first = find_route_violations(ids.cpu(), w.cpu(), shape.experts)[0]
            verdict.check(world.rank, f"expected RouteError at {first}, got {raised!r}",
                          raised is not None and (raised.row, raised.slot, raised.rule)
                          == (first.row, first.slot, first.rule))
            verdict.check(world.rank, "the caller's out was written by a failed forward",
                          torch.equal(bits(out), sentinel))
            verdict.check(world.rank, "the bad row is not NaN",
                          bool(layer.layer._out[BAD_ROW].isnan().all()))
            keep = torch.arange(x.shape[0]) != BAD_ROW
            verdict.equal_bits(world.rank, "rows beside the bad one", layer.layer._out[: x.shape[0]][
                keep.to(world.device)], clean[keep.to(world.device)])
        else:
            verdict.check(world.rank, f"a good rank raised {raised!r}", raised is None)
            verdict.equal_bits(world.rank, "a good rank's rows", out, clean)
        # the world goes on: the next clean forward is right everywhere
        x2, ids2, w2 = rank_inputs(state.ranks[world.rank], world.device)
        verdict.equal_bits(world.rank, "the next clean forward", layer.forward(x2, ids2, w2),
                           clean)
    finally:
        layer.destroy()
        ep1.destroy()
    verdict.assert_clean(world)
