"""Route tables on the host (``megamoe.layer.route_glue``, PyTorch path; docs/contract.md s3,
s5): judged against the routes themselves, not against the code: every live route lands
in its expert's segment, the routes of an expert fill it in layout order without gaps, and
each route's source row, term row, score and (nvfp4) global scale are its own."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from megamoe.dispatch import api as dispatch
from megamoe.errors import ConfigError
from megamoe.experts.api import TILE_M, capacity_rows
from megamoe.layer.route_glue import PATH_TORCH, GlobalScales, RouteTables, build_route_tables

E, K, C = 12, 3, 40


def _case(seed: int, mask_p: float, nv: bool):
    g = torch.Generator().manual_seed(seed)
    ids = torch.rand(C, E, generator=g).argsort(dim=1)[:, :K].to(torch.int32)
    ids[torch.rand(C, K, generator=g) < mask_p] = -1
    scores = torch.rand(C, K, generator=g)
    r, m_cap = C * K, capacity_rows(C * K, E)
    pre = (torch.zeros(m_cap + 1, 4), torch.zeros(m_cap + 1, 4)) if nv else None
    tables = RouteTables(torch.zeros(E, dtype=torch.int32), torch.zeros(E + 1, dtype=torch.int32),
                         torch.zeros(r, dtype=torch.int64), torch.zeros(r, dtype=torch.int64),
                         torch.zeros(r, dtype=torch.int64), torch.zeros(m_cap + 1), pre)
    gs = (GlobalScales(torch.tensor([0.5, 0.25]), torch.rand(E, generator=g) + 0.5,
                       torch.rand(E, generator=g) + 0.5) if nv else None)
    return ids, scores, tables, gs


def route_table_problems(ids, scores, tables: RouteTables, gs) -> list[str]:
    """What is wrong with ``tables`` for these routes (empty when nothing)."""
    problems = []
    active = (ids >= 0) & (ids < E)
    counts = torch.bincount(ids[active].long(), minlength=E)
    if not torch.equal(tables.counts.long(), counts):
        problems.append("counts")
    padded = (counts + TILE_M - 1) // TILE_M * TILE_M
    seg = torch.cat((torch.zeros(1, dtype=torch.int64), padded.cumsum(0)))
    if not torch.equal(tables.seg.long(), seg):
        problems.append("seg")
    n = int(active.sum())
    next_row = seg[:-1].clone()
    for i in range(n):
        row, slot = int(tables.src_row[i]), int(tables.term_row[i]) - int(tables.src_row[i]) * K
        if not (0 <= row < C and 0 <= slot < K) or not bool(active[row, slot]):
            problems.append(f"route {i}: row {row} slot {slot} is not a live slot")
            continue
        e = int(ids[row, slot])
        if int(tables.pos[i]) != int(next_row[e]):
            problems.append(f"route {i}: GEMM row {int(tables.pos[i])}, expected {int(next_row[e])}")
        next_row[e] += 1
        p = int(tables.pos[i])
        if tables.row_scale[p] != scores[row, slot]:
            problems.append(f"route {i}: score")
        if gs is not None and tables.pre is not None:
            if not bool((tables.pre[0][p] == gs.act[0] * gs.w13[e]).all()):
                problems.append(f"route {i}: FC1 pre-scale")
            if not bool((tables.pre[1][p] == gs.act[1] * gs.w2[e]).all()):
                problems.append(f"route {i}: FC2 pre-scale")
    if not torch.equal(next_row, seg[:-1] + counts):
        problems.append("some expert's segment is not filled")
    return problems


@pytest.mark.parametrize("nv", [False, True], ids=["plain", "nvfp4"])
@pytest.mark.parametrize("mask_p", [0.0, 0.4, 1.0])
def test_tables_place_every_live_route_in_its_experts_segment(nv, mask_p) -> None:
    ids, scores, tables, gs = _case(int(mask_p * 10), mask_p, nv)
    lay = dispatch.dispatch_layout(ids, E, 1)
    assert build_route_tables(lay, scores, K, tables, gs) == PATH_TORCH
    assert route_table_problems(ids, scores, tables, gs) == []


def test_the_checker_catches_a_shifted_gemm_row() -> None:
    """Planted bug: every GEMM row one too high."""
    ids, scores, tables, gs = _case(5, 0.2, False)
    build_route_tables(dispatch.dispatch_layout(ids, E, 1), scores, K, tables, gs)
    tables.pos.add_(1)
    assert any("GEMM row" in p for p in route_table_problems(ids, scores, tables, gs))


def test_nvfp4_tables_need_scales_and_scales_need_nvfp4_tables() -> None:
    ids, scores, tables, gs = _case(6, 0.0, True)
    lay = dispatch.dispatch_layout(ids, E, 1)
    with pytest.raises(ConfigError, match="g"):
        build_route_tables(lay, scores, K, tables, None)
    with pytest.raises(ConfigError, match="g"):
        build_route_tables(lay, scores, K, dataclasses.replace(tables, pre=None), gs)
