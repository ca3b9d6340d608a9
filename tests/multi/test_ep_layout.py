"""The receive side, bitwise (docs/contract.md s7, s8): the dispatch layout every rank computes
(counts per source rank and expert, offsets, order, active extent) equals the oracle's
``dispatch_layout`` over all ranks; each received row proves where it came from (tagged
payloads: its source rank and row in its first columns) and lands at its place in the
order; its staged score travels with it, bit for bit. Over every state of the changing-route
scenario set."""

from __future__ import annotations

import pytest
import torch

from fixtures.scenarios import CHANGING_ROUTE_SEQUENCE
from oracle.routing import dispatch_layout, stage_routes
from tests.multi.ep_world import OURS, Verdict, build_layer, config, shape_of, world_scenario

LAYOUT_FIELDS = ("counts", "expert_counts", "rank_counts", "expert_offsets", "order",
                 "order_expert", "active_extent")
TAG_COLUMNS = 3
"""Columns 0..2 of a tagged row: source rank, row // 64, row % 64 (exact in bf16)."""


def tag(hidden: torch.Tensor, rank: int) -> torch.Tensor:
    out = hidden.clone()
    rows = torch.arange(out.shape[0])
    out[:, 0] = rank
    out[:, 1] = (rows // 64).to(out.dtype)
    out[:, 2] = (rows % 64).to(out.dtype)
    return out


@pytest.mark.contract("s7.ep-layout-bitwise", "s7.every-rank-every-step", "s8.bitwise-stages")
def test_layout_and_received_rows_prove_their_source(world) -> None:
    shape = shape_of(world)
    cfg = config(shape)  # bf16: the payload moves as the caller's bytes
    layer = build_layer(OURS, cfg, world, shape, world.device)
    ep = layer.layer._ep  # our exchange's receive side (this test reads its internals)
    e_l = shape.experts // world.size
    verdict = Verdict()
    try:
        for i, name in enumerate(CHANGING_ROUTE_SEQUENCE):
            state = world_scenario(world, shape, name, 23)
            live = [r.live() for r in state.ranks]
            x, ids, w = (t.to(world.device) for t in live[world.rank])
            x = tag(x, world.rank)
            if i == 0:
                layer.warmup(x, ids, w)
            else:
                layer.forward(x, ids, w)
            staged = [stage_routes(ids_r, w_r, shape.capacity) for _, ids_r, w_r in live]
            want = dispatch_layout([s[0] for s in staged], shape.experts, world.size)
            got = ep.layout.trimmed()
            for f in LAYOUT_FIELDS:
                a, b = getattr(got, f).cpu(), getattr(want, f)
                verdict.check(world.rank, f"{name}: layout {f} differs from the oracle's",
                              a.shape == b.shape and torch.equal(a, b))
            base = int(want.expert_offsets[world.rank * e_l])
            n = int(want.rank_counts[world.rank])
            order = want.order[base : base + n]
            verdict.check(world.rank, f"{name}: received {int(ep.recv_count)} routes, "
                          f"the layout says {n}", int(ep.recv_count) == n)
            rows = ep.recv_payload[:n].cpu()
            tags = torch.stack([order[:, 0], order[:, 1] // 64, order[:, 1] % 64], 1)
            verdict.check(world.rank, f"{name}: a received row does not carry the source "
                          "rank and row of its place in the order",
                          torch.equal(rows[:, :TAG_COLUMNS].long(), tags))
            scores = torch.stack([s[1] for s in staged])
            sent = scores[order[:, 0], order[:, 1], order[:, 2]]
            got_scores = ep.recv_scores[:n, 0].cpu()
            verdict.check(world.rank, f"{name}: received scores differ from the staged ones",
                          torch.equal(got_scores.view(torch.int32), sent.view(torch.int32)))
    finally:
        layer.destroy()
    verdict.assert_clean(world)
