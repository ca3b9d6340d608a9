"""The narrow MX defaults' pipeline depth (``mxfp4_gemm_kernel.MX_NARROW_DEPTHS``): a deeper
TMA pipeline only where it keeps the CTAs per SM it was measured with.

The expectations are H200 facts computed by hand, not read back from the code: a Hopper SM
has 228 KiB of shared memory and keeps 1 KiB per resident CTA; a 64-row specialized FP4
CTA holds per stage a 64 x 64 bf16 A tile (8 KiB) and 64 rows x 32 bytes of packed codes
(2 KiB), three 64 x 64 bf16 decoded B tiles (24 KiB), and the tile's scale bytes for all of
K (64 x K / 32 for MXFP4's 32-element blocks, 64 x K / 16 for NVFP4's 16), except in a
``scale_regs`` variant whose rows' scale bytes are whole 16-byte vectors (K a multiple of
512, NVFP4 256), which keeps one 16-byte vector there instead. The measured preference
(docs/perf.md, "Session 21" for MXFP4, "Session 22" for NVFP4, "Session 23" for the scale
bytes in registers): ``m64n64s4wsr`` where three CTAs fit, else ``m64n64s6ws`` where two
do, else the format's first 64-row variant as before (MXFP4 ``m64n64s3ws``, NVFP4
``m64n64s2ws``). MXFP8 (session 24): its stage holds 64 x 64 bytes of E4M3 codes (4 KiB);
``m64n64s4wsr`` where three CTAs fit, else ``m64n64s3ws``. Session 25: the register variant
with the segments' first halves first (``m64n64s4wsrh``, ``KernelConfig.halves``; the same
shared memory) in its place, every format: the DeepSeek layer 13-24 % faster at one expert
T <= 16, 7-12 % at uniform T = 1, within 1 % at T = 256. Session 26: the fallbacks where
the scale run keeps ``m64n64s4wsrh`` to two CTAs (gpt-oss's K = 2880) with the same raster
(``m64n64s6wsh``, MXFP8 ``m64n64s3wsh``). Session 27: MXFP4 and NVFP4 first take the
register variant with four decoded B tiles (``m64n64s4wsrhb4``, ``KernelConfig.b_tiles``:
8 KiB more) where it keeps three CTAs, else the session-25 rule.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from megamoe.experts import mxfp4_gemm_kernel as mk
from megamoe.experts.grouped_gemm_kernel import KernelConfig

S2 = KernelConfig(64, 2, tile_m=64, specialized=True)
S3 = KernelConfig(64, 3, tile_m=64, specialized=True)
S4 = KernelConfig(64, 4, tile_m=64, specialized=True)
S6 = KernelConfig(64, 6, tile_m=64, specialized=True)
S4R = KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True)
S4RH = KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True)
S4RHB4 = KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True,
                      b_tiles=4)
S3H = KernelConfig(64, 3, tile_m=64, specialized=True, halves=True)
S6H = KernelConfig(64, 6, tile_m=64, specialized=True, halves=True)
SMALL_CAPACITY = 8 * 16  # DeepSeek T = 16: 128 routes
EXPERTS = 256  # DeepSeek's E: the narrow bound is 64 rows per expert, 16384 routes
DEEPSEEK_FC1 = (4096, 7168)  # (N, K): N = 2 * I, K = H
DEEPSEEK_FC2 = (7168, 2048)
GPTOSS_FC1 = (5760, 2880)
GPTOSS_FC2 = (2880, 2880)


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


SCALE_BLOCK = {"mxfp4": 32, "nvfp4": 16, "mxfp8": 32}  # weights per scale byte (docs/contract.md s4)
CODE_BYTES = {"mxfp4": 32, "nvfp4": 32, "mxfp8": 64}  # one row's codes in a 64-wide k tile


def _by_hand(stages: int, k: int, weights: str = "mxfp4", regs: bool = False,
             b_tiles: int = 3) -> int:
    """Bytes of one CTA's shared memory, laid out field by field as the docstring says:
    barriers (8 bytes each: two per TMA stage, two per decoded tile) and the split-K slot,
    then the 1 KiB aligned A stages and B tiles, the codes (E2M1 two per byte, MXFP8's E4M3
    one), the scale bytes (one 16-byte vector for a register variant at a K of whole
    vectors)."""
    row_scales = k // SCALE_BLOCK[weights]
    off = 8 * 2 * stages + 8 * 2 * b_tiles + 4
    off = _align(off, 1024) + 64 * 64 * 2 * stages
    off = _align(off, 1024) + 64 * 64 * 2 * b_tiles
    off = _align(off, 128) + 64 * CODE_BYTES[weights] * stages
    run = 16 if regs and row_scales % 16 == 0 else 64 * row_scales
    return _align(off, 16) + run


@pytest.mark.parametrize("weights", ["mxfp4", "nvfp4", "mxfp8"])
@pytest.mark.parametrize("cfg", [S2, S3, S4, S6, S4R, S4RH, S4RHB4], ids=lambda c: c.name)
@pytest.mark.parametrize("k", [256, 2048, 2880, 7168, 16384])
def test_the_shared_memory_of_a_cta_is_its_tiles(cfg: KernelConfig, k: int,
                                                  weights: str) -> None:
    got = mk.mx_storage(cfg, k, weights).size_in_bytes()
    want = _by_hand(cfg.stages, k, weights, cfg.scale_regs, cfg.b_tiles)
    # the struct may round its end up to its own alignment (1 KiB), never more
    assert want <= got < want + 1024


@pytest.mark.parametrize(("cfg", "k", "ctas"), [
    (S3, 7168, 3),  # 69 KiB + 1: 3 x 70 = 210 <= 228
    (S4, 7168, 2),  # 79 KiB + 1: 3 x 80 = 240 > 228
    (S6, 7168, 2),  # 99 KiB + 1: 2 x 100 <= 228
    (S4, 2048, 3),  # 69 KiB + 1
    (S4, 2880, 3),  # 70 KiB + 1
    (S6, 16384, 1),  # 119 KiB + 1: 2 x 120 = 240 > 228
    (S3, 16384, 2),
    (S4R, 7168, 3),  # 65 KiB + 16 bytes, 66 as the struct ends on 1 KiB, + 1: 3 x 67 <= 228
    (S4R, 2048, 3),
    (S4R, 2880, 3),  # 90 scale bytes per row: the run stays (70 KiB + 1)
    (S4R, 16384, 3),  # the register variant's shared memory does not grow with K
    (S4RH, 7168, 3),  # the raster changes no byte of shared memory
    (S4RH, 2880, 3),
    (S4RHB4, 7168, 3),  # a fourth 8 KiB B tile: 73 KiB + 16 bytes, 74, + 1: 3 x 75 <= 228
    (S4RHB4, 2048, 3),
    (S4RHB4, 2880, 2),  # the run stays: 79 KiB + 1: 3 x 80 = 240 > 228
])
def test_ctas_per_sm_at_the_measured_shapes(cfg: KernelConfig, k: int, ctas: int) -> None:
    assert mk.ctas_per_sm(cfg, k) == ctas


@pytest.mark.parametrize(("cfg", "k", "ctas"), [
    (S2, 7168, 3),  # 73 KiB + 1: 3 x 74 = 222 <= 228
    (S4, 7168, 2),  # 93 KiB + 1
    (S6, 7168, 2),  # 113 KiB + 1: 2 x 114 = 228
    (S4, 2048, 3),  # 73 KiB + 1
    (S4, 2880, 2),  # 76.25 KiB, 77 as the struct ends on 1 KiB, + 1: 3 x 78 = 234 > 228
    (S2, 2048, 3),  # 53 KiB + 1 would fit four, but 4 x 288 threads x 64 registers > 65536
    (S4R, 7168, 3),  # 65 KiB + 16 bytes: 28 KiB of scale run gone
    (S4R, 2880, 2),  # 180 scale bytes per row: the run stays, as S4
    (S4RHB4, 7168, 3),  # 73 KiB + 16 bytes, 74, + 1: 3 x 75 <= 228
    (S4RHB4, 2880, 2),
])
def test_nvfp4_ctas_per_sm_count_its_twice_as_many_scale_bytes(cfg: KernelConfig, k: int,
                                                               ctas: int) -> None:
    assert mk.ctas_per_sm(cfg, k, "nvfp4") == ctas


SHAPE_IDS = {DEEPSEEK_FC1: "deepseek-fc1", DEEPSEEK_FC2: "deepseek-fc2",
             GPTOSS_FC1: "gptoss-fc1", GPTOSS_FC2: "gptoss-fc2", (4096, 16384): "k16384"}
NARROW_CHOICES = [
    # S4RH, not S4R (session 25): the same kernel with the segments' first halves first;
    # S4RHB4 (session 27): S4RH with a fourth B tile, 3-7 % faster at DeepSeek uniform
    # MXFP4 (session 23): three CTAs without the run at every shape measured
    ("mxfp4", DEEPSEEK_FC1, S4RHB4),  # S4RH: 12-13 % faster than s6ws at uniform T = 16, 64
    ("mxfp4", DEEPSEEK_FC2, S4RHB4),  # S4RH: 4 % faster than s4ws
    ("mxfp4", GPTOSS_FC1, S4RH),  # K = 2880: the run stays (S4's code); three CTAs, B4 two
    ("mxfp4", GPTOSS_FC2, S4RH),
    ("mxfp4", (4096, 16384), S4RHB4),  # no run: three CTAs at any K of whole vectors
    # NVFP4 (session 23)
    ("nvfp4", DEEPSEEK_FC1, S4RHB4),  # S4RH: 14 % faster than s6ws at uniform T = 16, 64
    ("nvfp4", DEEPSEEK_FC2, S4RHB4),  # S4RH: 5 % faster than s4ws
    # K = 2880 keeps the run, twice MXFP4's: s4 would leave two; S6H, not S6 (session 26):
    # the fallback with the first-halves raster, 1-32 % faster in the GEMM alone
    ("nvfp4", GPTOSS_FC1, S6H),
    ("nvfp4", GPTOSS_FC2, S6H),
    ("nvfp4", (4096, 16384), S4RHB4),
    # MXFP8 (session 24): 3-14 % faster than s3ws at DeepSeek uniform T = 1 to 64, within
    # 3 % at one expert; where the run stays (K = 2880) two CTAs fit, so the 3-stage variant;
    # no four-tile variant (session 27: 2-23 % slower at DeepSeek uniform)
    ("mxfp8", DEEPSEEK_FC1, S4RH),
    ("mxfp8", DEEPSEEK_FC2, S4RH),
    ("mxfp8", GPTOSS_FC1, S3H),  # session 26: s3ws with the raster, 1-21 % faster
    ("mxfp8", GPTOSS_FC2, S3H),
    ("mxfp8", (4096, 16384), S4RH),
]


@pytest.mark.parametrize(("weights", "shape", "expected"), NARROW_CHOICES,
                         ids=[f"{w}-{SHAPE_IDS[s]}" for w, s, _ in NARROW_CHOICES])
@pytest.mark.parametrize("routes", [1, SMALL_CAPACITY, 8192, 64 * EXPERTS])  # the bound, by hand
def test_the_narrow_default_takes_the_deepest_pipeline_that_keeps_its_ctas(
        weights: str, shape: tuple[int, int], expected: KernelConfig, routes: int) -> None:
    n, k = shape
    cfg = mk.mx_default_config(n, weights, routes, k, EXPERTS)
    assert cfg == expected
    assert cfg in mk.CONFIGS_BY_FORMAT[weights]  # compiled, so GPU-tested


def test_the_depth_rule_is_caught_when_it_ignores_occupancy(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: an occupancy estimate that ignores K (always three CTAs) hands gpt-oss's
    NVFP4 FC1 (whose K keeps the scale run) the 4-stage variant, which the selection test
    above refuses."""
    monkeypatch.setattr(mk, "ctas_per_sm", lambda cfg, k, weights="mxfp4": 3)
    n, k = GPTOSS_FC1
    assert mk.mx_default_config(n, "nvfp4", SMALL_CAPACITY, k, EXPERTS) == S4RHB4 != S6H


def test_the_depth_rule_is_caught_when_it_ignores_the_b_tiles(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: an occupancy estimate that counts the default three B tiles whatever the
    variant names hands gpt-oss's MXFP4 FC1 (K = 2880, where four tiles leave two CTAs) the
    four-tile variant; the selection test above expects ``m64n64s4wsrh`` there."""
    real = mk.ctas_per_sm
    monkeypatch.setattr(mk, "ctas_per_sm", lambda cfg, k, weights="mxfp4":
                        real(replace(cfg, b_tiles=3), k, weights))
    n, k = GPTOSS_FC1
    assert mk.mx_default_config(n, "mxfp4", SMALL_CAPACITY, k, EXPERTS) == S4RHB4 != S4RH


def test_every_preferred_depth_is_a_compiled_variant() -> None:
    """``MX_NARROW_DEPTHS`` names variants; each must be a compiled (GPU-tested) 64-row
    specialized variant of its format, or the preference would silently never apply."""
    for kind, depths in mk.MX_NARROW_DEPTHS.items():
        compiled = {c.name for c in mk.CONFIGS_BY_FORMAT[kind]
                    if c.tile_m == 64 and c.specialized and c.splits == 1}
        assert {name for name, _ in depths} <= compiled, kind


@pytest.mark.parametrize("shape", [DEEPSEEK_FC1, DEEPSEEK_FC2, GPTOSS_FC1])
def test_without_k_or_past_the_narrow_bound_the_choice_is_unchanged(
        shape: tuple[int, int]) -> None:
    n, k = shape
    assert mk.mx_default_config(n, "mxfp4", SMALL_CAPACITY, None, EXPERTS) == S3  # no K
    wide = mk.mx_default_config(n, "mxfp4", 64 * EXPERTS + 1, k, EXPERTS)
    assert wide == mk.mx_default_config(n, "mxfp4") and wide.tile_m == 128
    assert mk.mx_default_config(n, "nvfp4", SMALL_CAPACITY, None, EXPERTS) == S2  # first 64-row
    assert mk.mx_default_config(n, "mxfp8", SMALL_CAPACITY, None, EXPERTS) == S3


@pytest.mark.parametrize(("k", "ctas"), [
    (7168, 3),  # 73 KiB + 16 bytes, 74 as the struct ends on 1 KiB, + 1: 225 <= 228
    (2048, 3),
    (2880, 2),  # 90 scale bytes per row, the run stays: 78.6 KiB + 1
    (16384, 3),
])
def test_mxfp8_register_variant_keeps_three_ctas_where_its_scale_bytes_are_vectors(
        k: int, ctas: int) -> None:
    assert mk.ctas_per_sm(S4R, k, "mxfp8") == ctas


def test_b_tiles_are_a_specialized_variants_and_named() -> None:
    """Only the specialized kernel hands its B tiles over through a pipeline of any depth
    (the other's barrier scheme needs exactly three); a variant with another count says so
    in its name, the default does not."""
    assert S4RHB4.name == "m64n64s4wsrhb4" and S4RH.name == "m64n64s4wsrh"
    with pytest.raises(ValueError, match="b_tiles"):
        KernelConfig(64, 4, tile_m=64, b_tiles=4)
    with pytest.raises(ValueError, match="b_tiles"):
        KernelConfig(64, 4, tile_m=64, specialized=True, b_tiles=1)
