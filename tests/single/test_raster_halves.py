"""The first-halves raster (``KernelConfig.halves``, ``grouped_gemm_kernel.halves_tile``) on a
Hopper GPU (docs/contract.md s7, s8).

A halves variant gives the segments' first 64-row tiles the grid's first blocks; every tile
still has one CTA, so every live row must be bit for bit its twin's (the same variant
without the raster), and no row outside the live segments may be written. The cases give
the GEMM the layer's kind of grid: ``M_cap`` far past the live rows (the rows a route
capacity reserves), and rows in both halves of a segment. (An odd count of live tiles
cannot occur under the segment contract, ``seg_start`` multiples of 128 and
``seg_start[E] <= M_cap``; the raster's odd path is checked on the host.)"""

from __future__ import annotations

import pytest
import torch

from megamoe.experts.grouped_gemm_kernel import KernelConfig
from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import live_mask, poison_
from tests.host.test_raster_halves_host import halves_twin
from tests.mxfp4_case import make_mxfp4_case
from tests.single.test_mxfp4_gemm_kernel import _check, _run

PAIRS = [(kind, halves_twin(cfg), cfg) for kind, cfgs in CONFIGS_BY_FORMAT.items()
         for cfg in cfgs if cfg.halves]
"""(format, twin, halves variant) for every compiled halves variant (its twin,
``halves_twin``: no raster and the default B tiles, is compiled too:
``tests/host/test_raster_halves_host.py``). The ``scale_regs`` ones (``m64n64s4wsrh``, and
``m64n64s4wsrhb4`` with four B tiles) read their scale bytes from registers at K = 1024;
the others (the fallbacks ``m64n64s6wsh``, MXFP8's ``m64n64s3wsh``) from the K-long run in
shared memory."""
M_CAP = 4160  # 65 row tiles of 64: the layer's kind of grid, far past the live rows
COUNTS = ([1], [0, 0, 0, 0, 0, 0, 0, 17], [3, 70, 0, 129])
"""One expert with one row (the layer's skewed T = 1), one late expert, several experts with
rows in both halves of a segment (70, 129)."""


def _with_rows(case: dict, m_cap: int) -> dict:
    """``case`` with its row buffers (A, out, the pre-scale wire, the row scale) grown to
    ``m_cap`` rows: the segments and live rows stay, the grid grows."""
    out = dict(case)
    rows = case["a"].shape[0]
    assert m_cap > rows
    for key in ("a", "pre", "scale", "out"):
        t = case[key]
        if t is None:
            continue
        grown = torch.zeros((m_cap, *t.shape[1:]), dtype=t.dtype, device=t.device)
        grown[:rows] = t
        out[key] = grown
    return out


def _twin_then_halves(case: dict, mode: str, live: torch.Tensor, twin: KernelConfig,
                      halves: KernelConfig) -> None:
    poison_(case["out"])
    _run(case, mode, None, twin)
    want = case["out"][live].clone()
    poison_(case["out"])
    _run(case, mode, None, halves)
    assert same_bits(case["out"][live], want), f"{mode}: rows differ from the twin's"
    _check(case, mode, None)  # within s8 of the PyTorch path; dead rows still poison


@pytest.mark.parametrize("mode", ["plain", "swiglu"])
@pytest.mark.parametrize("counts", COUNTS, ids=["one-row", "late-expert", "several"])
@pytest.mark.parametrize(("kind", "twin", "halves"), PAIRS,
                         ids=[f"{k}-{h.name}" for k, _, h in PAIRS])
def test_the_halves_grid_gives_the_twins_rows(cuda_device, kind, twin, halves, counts,
                                              mode) -> None:
    assert halves in CONFIGS_BY_FORMAT[kind] and twin in CONFIGS_BY_FORMAT[kind]
    n = 256 if mode == "swiglu" else 192
    case = _with_rows(make_mxfp4_case(mode, counts, 1024, n, seed=61,
                                      device=cuda_device, weights=kind), M_CAP)
    live = live_mask(case["seg"].tolist(), case["counts"].tolist(), M_CAP).to(cuda_device)
    _twin_then_halves(case, mode, live, twin, halves)


