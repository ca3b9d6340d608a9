"""Seed 001's multirank ``fp8_mxfp4`` cases (suite ``mega_sm90_mxfp4``, item ``multirank``;
docs/contract.md s7-s10): M = 1, 4, 16, 128 and 1024 live rows per rank; routes uniform over
the experts, skewed (every route of every rank to the K lowest experts), or uniform with the
last rank empty; each through its original, changed and restored inputs. Every rank's every
live row meets the collective oracle and equals EP1 bit for bit, and the restored inputs give
the original bits. Eagerly in every world; on GPUs also on one captured graph per rank, three
replays per phase, each replay equal to the first."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.layer_check import layer_routes
from tests.multi.ep_world import (
    CapturedLayer,
    Verdict,
    bits,
    build_layer,
    config,
    judge_first,
    oracle_outputs,
    shape_of,
)

SEED_M = (1, 4, 16, 128, 1024)
ROUTINGS = ("uniform", "skewed", "empty-rank")
PHASES = (("original", 1), ("changed", 2), ("restored", 1))
GRAPH_REPLAYS = 3
RECIPE = "fp8_mxfp4"


def seed_shape(world):  # type: ignore[no-untyped-def]
    """The tier's shape with a capacity that holds M = 1024."""
    return dataclasses.replace(shape_of(world), capacity=max(SEED_M))


def seed_inputs(world_size: int, shape, m: int, routing: str, seed: int  # type: ignore[no-untyped-def]
                ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Every rank's live inputs (CPU) for one case and phase."""
    out = []
    for r in range(world_size):
        t = 0 if routing == "empty-rank" and r == world_size - 1 else m
        x, ids, w = layer_routes(seed * 131 + r, t, num_experts=shape.experts,
                                 top_k=shape.top_k, hidden=shape.hidden, mask_p=0.25)
        if routing == "skewed":
            lowest = torch.arange(shape.top_k).expand_as(ids)
            ids = torch.where(ids == -1, -1, lowest)
        out.append((x, ids, w))
    return out


def _padded(x, ids, w, c: int):  # type: ignore[no-untyped-def]
    """Capacity-shaped inputs: rows past the live count hold garbage (NaN rows, ids out of
    range, infinite scores), which no forward may read."""
    pad = c - x.shape[0]
    return (torch.cat([x, torch.full((pad, x.shape[1]), float("nan")).bfloat16()]),
            torch.cat([ids, torch.full((pad, ids.shape[1]), 2**40)]),
            torch.cat([w, torch.full((pad, w.shape[1]), float("inf"))]))


@pytest.mark.contract("s7.ep-rows-meet-reference", "s7.ep-equals-ep1")
@pytest.mark.mega_sm90_mxfp4("multirank")
@pytest.mark.parametrize("routing", ROUTINGS)
def test_seed_fp8_mxfp4_cases_eager(moe_backend, world, routing) -> None:
    shape = seed_shape(world)
    cfg = config(shape, RECIPE)
    dev = world.device
    layer = build_layer(moe_backend, cfg, world, shape, dev)
    ep1 = build_layer(moe_backend, cfg, None, shape, dev)
    v = Verdict()
    warm = False
    try:
        for m in SEED_M:
            got: dict[str, torch.Tensor] = {}
            for phase, seed in PHASES:
                inputs = seed_inputs(world.size, shape, m, routing, 100 * m + seed)
                x, ids, w = (a.to(dev) for a in inputs[world.rank])
                if not warm:
                    layer.warmup(x, ids, w)
                    ep1.warmup(x, ids, w)
                    warm = True
                out = layer.forward(x, ids, w)
                what = f"M={m} {routing} {phase}"
                want = oracle_outputs(cfg, shape, inputs)[world.rank]
                v.judge(world.rank, what, out, want, ids, RECIPE)
                v.equal_bits(world.rank, f"{what} vs EP1", out, ep1.forward(x, ids, w))
                got[phase] = out
            v.equal_bits(world.rank, f"M={m} {routing}: restored vs original", got["restored"],
                         got["original"])
    finally:
        layer.destroy()
        ep1.destroy()
    v.assert_clean(world)


@pytest.mark.contract("s9.replay-equals-eager", "s10.multi-rank-replay")
@pytest.mark.cuda_graphs
@pytest.mark.mega_sm90_mxfp4("multirank")
@pytest.mark.parametrize("routing", ROUTINGS)
def test_seed_fp8_mxfp4_cases_on_one_graph(moe_backend, world, routing) -> None:
    shape = seed_shape(world)
    c = shape.capacity
    cl = CapturedLayer(moe_backend, world, config(shape, RECIPE), shape)
    v = Verdict()
    try:
        for m in SEED_M:
            first: dict[str, torch.Tensor] = {}
            for phase, seed in PHASES:
                inputs = seed_inputs(world.size, shape, m, routing, 100 * m + seed)
                x, ids, w = inputs[world.rank]
                t = x.shape[0]
                cl.load(*_padded(x, ids, w, c), t)
                outs = [cl.replay() for _ in range(GRAPH_REPLAYS)]
                cl.layer.check_errors()
                what = f"M={m} {routing} {phase}"
                for i, out in enumerate(outs[1:], start=2):
                    v.equal_bits(world.rank, f"{what}: replay {i} vs replay 1", out, outs[0])
                want = oracle_outputs(cl.cfg, shape, inputs)[world.rank]
                judge_first(v, cl, what, outs[0], t, (x, ids, w), want)
                first[phase] = outs[0][:t]
            v.check(world.rank, f"M={m} {routing}: restored differs from original",
                    torch.equal(bits(first["restored"]), bits(first["original"])))
    finally:
        cl.destroy()
    v.assert_clean(world)
