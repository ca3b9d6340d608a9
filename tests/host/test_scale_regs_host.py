"""``scale_regs`` variants on the host: when the scale bytes leave shared memory, what that
frees, and that a default takes such a variant only where it was measured (docs/contract.md s4
scale blocks; the GPU rows: ``tests/single/test_scale_regs.py``)."""

from __future__ import annotations

import pytest

from megamoe.experts.grouped_gemm_kernel import KernelConfig
from megamoe.experts.mxfp4_gemm_kernel import (
    CONFIGS_BY_FORMAT,
    SCALE_VEC_BYTES,
    WEIGHT_FORMATS,
    ctas_per_sm,
    mx_default_config,
    mx_storage,
    scale_run_in_smem,
)
from tests.host.test_mx_pipeline_depth_host import SCALE_BLOCK  # docs/contract.md s4, by hand

REGS = KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True)
RUN = KernelConfig(64, 4, tile_m=64, specialized=True)


def test_the_name_marks_the_register_variant() -> None:
    assert REGS.name == "m64n64s4wsr"
    assert RUN.name == "m64n64s4ws"


@pytest.mark.parametrize(("kw", "why"), [
    ({"specialized": False}, "the all-threads body has no separate decode warpgroup"),
    ({"specialized": True, "splits": 2}, "a K slice need not start on a vector"),
])
def test_a_register_variant_needs_the_specialized_body_without_split_k(kw, why) -> None:
    with pytest.raises(ValueError, match="scale_regs"):
        KernelConfig(64, 4, tile_m=64, scale_regs=True, **kw)


@pytest.mark.parametrize("weights", WEIGHT_FORMATS)
@pytest.mark.parametrize("k", [512, 2048, 2880, 7168, 8832])
def test_the_run_stays_in_shared_memory_unless_rows_are_whole_vectors(weights, k) -> None:
    row_bytes = k // SCALE_BLOCK[weights]
    whole = row_bytes % 16 == 0
    assert scale_run_in_smem(REGS, k, weights) is (not whole)
    assert scale_run_in_smem(RUN, k, weights) is True


@pytest.mark.parametrize("weights", WEIGHT_FORMATS)
@pytest.mark.parametrize("k", [2048, 7168])
def test_shared_memory_drops_by_the_run_less_one_vector(weights, k) -> None:
    """The 64-row tile's run of scale bytes, less the one vector kept in its place, within
    the struct's padding to its 1 KiB alignment (the wgmma tiles' swizzle)."""
    run = 64 * k // SCALE_BLOCK[weights]
    saved = (mx_storage(RUN, k, weights).size_in_bytes()
             - mx_storage(REGS, k, weights).size_in_bytes())
    assert run - SCALE_VEC_BYTES - 1024 < saved <= run


@pytest.mark.parametrize("weights", WEIGHT_FORMATS)
def test_four_stages_keep_three_ctas_per_sm_at_deepseek_fc1(weights) -> None:  # by smem
    """The reason for the variant: at K = 7168 the run (14 KiB MX, 28 KiB NVFP4) is what
    keeps a four-stage 64-row CTA to two per SM."""
    assert ctas_per_sm(RUN, 7168, weights) == 2
    assert ctas_per_sm(REGS, 7168, weights) == 3


@pytest.mark.parametrize("weights", WEIGHT_FORMATS)
@pytest.mark.parametrize("k", [None, 2048, 2880, 7168])
@pytest.mark.parametrize("routes", [None, 8192 + 1, 65536])
def test_wide_or_unknown_capacities_take_a_register_variant_for_nvfp4_only(
        weights, k, routes) -> None:
    """Past the narrow bound never the 64-row register variant; the 128-row one only for
    NVFP4, the one format where it was measured faster (docs/perf.md "Session 28"; MXFP4's
    and MXFP8's were not). Which 64-row variant the narrow default takes:
    ``test_mx_pipeline_depth_host.py``."""
    for n in (2880, 4096, 5760, 7168):
        cfg = mx_default_config(n, weights, routes, k)
        assert cfg.tile_m == 128 and cfg.scale_regs is (weights == "nvfp4")


def test_every_format_compiles_a_register_variant() -> None:
    """Compiled, so GPU-tested (``tests/single/test_scale_regs.py``)."""
    for weights in WEIGHT_FORMATS:
        assert REGS in CONFIGS_BY_FORMAT[weights]


@pytest.mark.parametrize("cfg", [
    KernelConfig(64, 3, tile_m=64, specialized=True, scale_regs=True),
    KernelConfig(64, 2, tile_m=64, specialized=True),
], ids=lambda c: c.name)
def test_registers_bound_the_ctas_per_sm_where_shared_memory_would_allow_more(cfg) -> None:
    """A Hopper SM has 65536 registers; these kernels' threads are counted at 64 (ptxas gives
    most of them 58, allocated in units of 8; ``test_mx_registers_host.py`` compiles the
    defaults and checks): four CTAs of 288 threads need 73728, so three, though
    their shared memory (at most 56 KiB + 1 KiB each here) would hold four."""
    assert 4 * (mx_storage(cfg, 2048, "mxfp4").size_in_bytes() + 1024) <= 228 * 1024
    assert ctas_per_sm(cfg, 2048, "mxfp4") == 3
