"""The route-table kernel (``megamoe.layer.route_glue``; docs/contract.md s3, s5) against its
PyTorch path on the same dispatch layout: counts and segment starts bit for bit, and for
every route ``i < N`` its source row, GEMM row, term row, score and (nvfp4) global-scale
products; also under a CUDA graph replayed with changed routes."""

from __future__ import annotations

import pytest
import torch

from megamoe.dispatch import api as dispatch
from megamoe.experts.api import capacity_rows
from megamoe.graphs import capture
from megamoe.layer.route_glue import (
    PATH_KERNEL,
    GlobalScales,
    RouteTables,
    build_route_tables,
    build_route_tables_torch,
    warmup,
)

E, K, C = 48, 4, 96


def _ids(seed: int, mask_p: float, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.rand(C, E, generator=g).argsort(dim=1)[:, :K].to(torch.int32)
    ids[torch.rand(C, K, generator=g) < mask_p] = -1
    return ids.to(device)


def _tables(device, nv: bool) -> RouteTables:
    r, m_cap = C * K, capacity_rows(C * K, E)

    def z(*shape, dtype=torch.int64):
        return torch.full(shape, -7, dtype=dtype, device=device)

    pre = ((z(m_cap + 1, 4, dtype=torch.float32), z(m_cap + 1, 4, dtype=torch.float32))
           if nv else None)
    return RouteTables(z(E, dtype=torch.int32), z(E + 1, dtype=torch.int32), z(r), z(r), z(r),
                       z(m_cap + 1, dtype=torch.float32), pre)


def _scales(device) -> GlobalScales:
    g = torch.Generator().manual_seed(9)
    return GlobalScales(torch.tensor([0.37, 0.021], device=device),
                        (torch.rand(E, generator=g) + 0.1).to(device),
                        (torch.rand(E, generator=g) + 0.1).to(device))


def _same(got: RouteTables, want: RouteTables, n: int) -> None:
    assert torch.equal(got.counts, want.counts) and torch.equal(got.seg, want.seg)
    for name in ("src_row", "pos", "term_row"):
        assert torch.equal(getattr(got, name)[:n], getattr(want, name)[:n]), name
    live = want.pos[:n]
    assert torch.equal(got.row_scale[live].view(torch.int32),
                       want.row_scale[live].view(torch.int32))
    if want.pre is not None and got.pre is not None:
        for a, b in zip(got.pre, want.pre, strict=True):
            assert torch.equal(a[live].view(torch.int32), b[live].view(torch.int32))


@pytest.mark.parametrize("nv", [False, True], ids=["plain", "nvfp4"])
@pytest.mark.parametrize("mask_p", [0.0, 0.5, 1.0])
def test_kernel_tables_equal_the_torch_path(cuda_device, nv, mask_p) -> None:
    ids = _ids(int(mask_p * 10) + nv, mask_p, cuda_device)
    lay = dispatch.dispatch_layout(ids, E, 1)
    scores = torch.rand(C, K, device=cuda_device)
    g = _scales(cuda_device) if nv else None
    got, want = _tables(cuda_device, nv), _tables(cuda_device, nv)
    assert build_route_tables(lay, scores, K, got, g) == PATH_KERNEL
    build_route_tables_torch(lay, scores, K, want, g)
    n = int(lay.num_routes[0])
    _same(got, want, n)
    assert bool((got.src_row[n:] == -7).all()), "entries past N were written"


def test_kernel_tables_follow_changed_routes_under_a_graph(cuda_device) -> None:
    warmup(cuda_device)
    ids = _ids(1, 0.2, cuda_device)
    ws = dispatch.LayoutWorkspace(dispatch.LayoutShape(1, C, K, E), cuda_device)
    scores = torch.rand(C, K, device=cuda_device)
    got = _tables(cuda_device, False)
    dispatch.warmup(cuda_device)
    dispatch.dispatch_layout(ids, E, 1, workspace=ws)
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        lay = dispatch.dispatch_layout(ids, E, 1, workspace=ws)
        build_route_tables(lay, scores, K, got)
    for seed, mask_p in ((2, 0.0), (3, 0.9), (4, 0.4)):
        ids.copy_(_ids(seed, mask_p, cuda_device))
        scores.copy_(torch.rand(C, K, device=cuda_device))
        graph.replay()
        want = _tables(cuda_device, False)
        fresh = dispatch.dispatch_layout(ids.clone(), E, 1)
        build_route_tables_torch(fresh, scores, K, want, None)
        _same(got, want, int(fresh.num_routes[0]))
