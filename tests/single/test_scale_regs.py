"""MX GEMM variants that keep the scale bytes in registers (``scale_regs``) on a Hopper GPU
(docs/contract.md s4 scale blocks, s8).

A ``scale_regs`` CTA does not copy its tile's K-long scale run into shared memory: each
decode thread loads its weight row's scale bytes from global memory in 16-byte vectors, one
vector ahead (``mxfp4_gemm_kernel.scale_run_in_smem``). The decoded bf16 values, and so
every output row, must be bit for bit those of the same variant reading the run from
shared memory. The scale bytes here are drawn independently per block, so a byte taken
from the wrong k tile, the wrong half of a row, the wrong row or the wrong vector changes
the rows: a check that compared only with smooth scales could miss it.
"""

from __future__ import annotations

import pytest
import torch

from megamoe.experts.grouped_gemm_kernel import KernelConfig
from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT, SCALE_BLOCK, scale_run_in_smem
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import live_mask, poison_
from tests.mxfp4_case import make_mxfp4_case
from tests.single.test_mxfp4_gemm_kernel import _check, _run

IN_REGS = KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True)
FORMATS = ("mxfp4", "mxfp8", "nvfp4")  # unrolled k loop (FP4) and picking loop (MXFP8)
KS = (512, 1536, 8192)
"""16-byte scale vectors per weight row: 1, 3 and 16 (NVFP4 2, 6 and 32): the first vector
alone, a few refills, and a DeepSeek-like long K."""
SCALE_BYTES = {"mxfp4": (118, 137), "mxfp8": (118, 137), "nvfp4": (0x30, 0x49)}
"""Scale bytes drawn per block: E8M0 2**-9 .. 2**9; E4M3 0.25 .. 3.25 (finite, positive)."""


def smem_twin(kind: str) -> KernelConfig:
    """The format's first 64-row specialized variant that copies the run (MXFP4 and MXFP8
    ``m64n64s3ws``, NVFP4 ``m64n64s2ws``): its rows are bit for bit those of any depth (the
    same in-order K loop, docs/contract.md s8)."""
    return next(c for c in CONFIGS_BY_FORMAT[kind]
                if c.tile_m == 64 and c.specialized and not c.scale_regs and c.splits == 1)


def _case(kind: str, k: int, seed: int, device) -> dict:
    case = make_mxfp4_case("plain", [3, 70, 0, 129], k, 192, seed=seed, pre=False,
                           device=device, weights=kind)
    lo, hi = SCALE_BYTES[kind]
    scales = case["b"].scales
    gen = torch.Generator().manual_seed(seed + 1)
    scales.copy_(torch.randint(lo, hi, scales.shape, generator=gen, dtype=torch.uint8))
    return case


WIDE_IN_REGS = [(kind, cfg) for kind, cfgs in CONFIGS_BY_FORMAT.items() for cfg in cfgs
                if cfg.scale_regs and cfg.tile_m != 64]
"""The 128-row register variants (two MMA warpgroups; NVFP4's ``n64s4wsr``, its default
past ``MX_NARROW_ROWS_PER_EXPERT``)."""


def assert_rows_are_the_twins(case: dict, kind: str, cfg: KernelConfig = IN_REGS) -> None:
    """Run the run-copying twin, then ``cfg`` (a register variant), on ``case``: every live
    row bit for bit the same, and (``_check``) within the s8 bound of the PyTorch path, dead
    rows untouched."""
    live = live_mask(case["seg"].tolist(), case["counts"].tolist(),
                     case["out"].shape[0]).to(case["out"].device)
    poison_(case["out"])
    _run(case, "plain", None, smem_twin(kind))
    want = case["out"][live].clone()
    poison_(case["out"])
    _run(case, "plain", None, cfg)
    assert same_bits(case["out"][live], want), f"{kind} {cfg.name}: rows differ from the twin's"
    _check(case, "plain", None)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("kind", FORMATS)
def test_scale_bytes_in_registers_give_the_shared_memory_bits(cuda_device, kind, k) -> None:
    assert k % (16 * SCALE_BLOCK[kind]) == 0
    assert not scale_run_in_smem(IN_REGS, k, kind), "this K must take the register path"
    assert_rows_are_the_twins(_case(kind, k, seed=43, device=cuda_device), kind)


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.mega_sm107("sparse-decode")
def test_a_k_without_whole_vectors_falls_back_to_the_run(cuda_device, kind) -> None:
    """K = 8832: 276 (NVFP4 552) scale bytes per row, not whole 16-byte vectors; the
    variant copies the run as its twin does, and its rows are the twin's."""
    k = 8832
    assert scale_run_in_smem(IN_REGS, k, kind)
    assert_rows_are_the_twins(_case(kind, k, seed=44, device=cuda_device), kind)


def test_a_128_row_register_variant_is_compiled() -> None:
    assert [(k, c.name) for k, c in WIDE_IN_REGS] == [("nvfp4", "n64s4wsr")]


@pytest.mark.parametrize("k", (*KS, 8832))
@pytest.mark.parametrize(("kind", "cfg"), WIDE_IN_REGS,
                         ids=[f"{k}-{c.name}" for k, c in WIDE_IN_REGS])
def test_the_128_row_register_variant_gives_the_shared_memory_bits(cuda_device, kind, cfg,
                                                                     k) -> None:
    """Two MMA warpgroups read the tiles one decode warpgroup fills from registers (and, at
    K = 8832, from the copied run): the experts of 3, 70 and 129 rows take one partial and
    one whole 128-row tile; every live row is the twin's."""
    assert scale_run_in_smem(cfg, k, kind) == (k == 8832)
    assert_rows_are_the_twins(_case(kind, k, seed=45, device=cuda_device), kind, cfg)


@pytest.mark.sanitizer
def test_sanitizer_case_128_row_register_variant(cuda_device) -> None:
    """Designated small case of the compute-sanitizer suite: each 128-row register variant
    (NVFP4's default past ``MX_NARROW_ROWS_PER_EXPERT``) on one partial and one whole
    128-row tile at a K of whole scale vectors (the decode threads' vector loads, the two MMA warpgroups'
    reads of the decoded tiles), every live row checked."""
    for kind, cfg in WIDE_IN_REGS:
        assert not scale_run_in_smem(cfg, 512, kind)
        case = _case(kind, 512, seed=46, device=cuda_device)
        poison_(case["out"])
        _run(case, "plain", None, cfg)
        _check(case, "plain", None)
