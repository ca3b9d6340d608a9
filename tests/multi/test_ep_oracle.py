"""Every rank's every live row against the collective reference (docs/contract.md s7, s8), for
every recipe, early and late weighting, clamp on and off, with per-rank live counts of C, 1
and 0; and bitwise equal to the EP1 layer of the same configuration on the same rows."""

from __future__ import annotations

import dataclasses
import zlib

import pytest

from tests.layer_check import layer_routes
from tests.multi.ep_world import (
    RECIPES,
    Verdict,
    build_layer,
    config,
    oracle_outputs,
    shape_of,
)

WEIGHTINGS = [(None, False), (0.5, False), (None, True), (4.0, True)]
"""(clamp, late_weighting): clamp off and on, with early and with late weighting."""


def tokens(rotation: int, world_size: int, capacity: int) -> list[int]:
    """Live rows per rank: ``(C, 1, 0)`` cycled, rotated so that over three rotations every
    rank holds C, 1 and 0 rows."""
    cycle = (capacity, 1, 0)
    return [cycle[(r + rotation) % 3] for r in range(world_size)]


def inputs_of(recipe: str, rotation: int, world_size: int, shape):  # type: ignore[no-untyped-def]
    out = []
    for r, t in enumerate(tokens(rotation, world_size, shape.capacity)):
        seed = zlib.crc32(f"{recipe}/{rotation}/{r}".encode())
        out.append(layer_routes(seed, t, num_experts=shape.experts, top_k=shape.top_k,
                                hidden=shape.hidden, mask_p=0.25))
    return out


@pytest.mark.contract("s5.clamp", "s5.weighting", "s7.ep-equals-ep1", "s7.ep-rows-meet-reference", "s7.every-rank-every-step", "s11.same-kernels-every-world")
@pytest.mark.parametrize(("clamp", "late"), WEIGHTINGS)
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_rank_meets_the_collective_oracle_and_ep1_bits(moe_backend, world, recipe, clamp,
                                                             late) -> None:
    shape = shape_of(world)
    cfg = config(shape, recipe, clamp=clamp, late_weighting=late)
    layer = build_layer(moe_backend, cfg, world, shape, world.device)
    ep1 = build_layer(moe_backend, cfg, None, shape, world.device)
    verdict = Verdict()
    try:
        for rotation in range(3):
            inputs = inputs_of(recipe, rotation, world.size, shape)
            want = oracle_outputs(cfg, shape, inputs)
            x, ids, w = (t.to(world.device) for t in inputs[world.rank])
            if rotation == 0:
                layer.warmup(x, ids, w)
                ep1.warmup(x, ids, w)
            got = layer.forward(x, ids, w)
            what = f"{recipe} clamp={clamp} late={late} T={x.shape[0]}"
            verdict.judge(world.rank, what, got, want[world.rank], ids, recipe)
            verdict.equal_bits(world.rank, f"{what} vs EP1", got, ep1.forward(x, ids, w))
    finally:
        layer.destroy()
        ep1.destroy()
    verdict.assert_clean(world)


@pytest.mark.contract("s7.ep-rows-meet-reference")
def test_a_rank_may_hold_fewer_experts_than_a_token_has_routes(moe_backend, world) -> None:
    """``K > E / P`` is a valid EP layer (a token's routes span several ranks' experts): it
    builds with each rank's ``E / P`` experts and meets the collective reference; at P = 1
    the largest ``K`` (``E``)."""
    base = shape_of(world)
    shape = dataclasses.replace(base, top_k=min(base.experts,
                                                base.experts // world.size + 1))
    cfg = config(shape, "bf16")
    layer = build_layer(moe_backend, cfg, world, shape, world.device)
    verdict = Verdict()
    try:
        inputs = [layer_routes(zlib.crc32(f"k>e_l/{r}".encode()), shape.capacity,
                               num_experts=shape.experts, top_k=shape.top_k,
                               hidden=shape.hidden, mask_p=0.25)
                  for r in range(world.size)]
        want = oracle_outputs(cfg, shape, inputs)
        x, ids, w = (t.to(world.device) for t in inputs[world.rank])
        layer.warmup(x, ids, w)
        verdict.judge(world.rank, f"K={shape.top_k} E/P={shape.experts // world.size}",
                      layer.forward(x, ids, w), want[world.rank], ids, "bf16")
    finally:
        layer.destroy()
    verdict.assert_clean(world)
