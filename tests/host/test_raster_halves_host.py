"""The first-halves raster (``grouped_gemm_kernel.halves_tile``, ``KernelConfig.halves``):
the live blocks still give every tile exactly one CTA, so no row's result can depend on it
(docs/contract.md s7: the variant never changes a row's bits), and the tiles of the segments'
first 64 rows, where a small batch's live rows sit, take consecutive blocks from 0.

The expectations are the definition's, written out by hand: the first ``ceil(T / 2)``
blocks take the even tiles in order, the rest the odd ones; and ``locate``'s raster (groups
of ``GROUP_M`` M tiles, M fastest) written out independently of the kernel's code."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megamoe.experts import grouped_gemm_kernel as gk
from megamoe.experts.grouped_gemm_kernel import B_TILES, GROUP_M, TILE_M, KernelConfig


def _host_select(cond: bool, a: int, b: int) -> int:
    return a if cond else b


def _tiles(tiles: int, fn=gk.halves_tile) -> list[int]:
    return [fn(b, tiles, select=_host_select) for b in range(tiles)]


def _raster_pid_m(tile: int, m_tiles: int, n_tiles: int) -> int:
    """``locate``'s M tile of raster tile ``tile``, by hand: groups of ``GROUP_M`` M tiles,
    inside a group the M tile fastest."""
    group, local = divmod(tile, GROUP_M * n_tiles)
    size = min(m_tiles - group * GROUP_M, GROUP_M)
    return group * GROUP_M + local % size


@given(tiles=st.integers(1, 20000))
def test_every_tile_gets_exactly_one_block(tiles: int) -> None:
    assert sorted(_tiles(tiles)) == list(range(tiles))


@pytest.mark.parametrize("tiles", [1, 2, 7, 128, 1024, 1792])
def test_the_even_tiles_take_the_first_blocks_in_order(tiles: int) -> None:
    got = _tiles(tiles)
    evens = (tiles + 1) // 2
    assert got[:evens] == list(range(0, tiles, 2))
    assert got[evens:] == list(range(1, tiles, 2))


@pytest.mark.parametrize(("m_tiles", "n_tiles"), [(2, 64), (2, 112), (16, 64), (20, 112),
                                                  (512, 64)])
def test_the_first_half_of_every_segment_takes_the_first_blocks(m_tiles: int,
                                                                n_tiles: int) -> None:
    """64-row tiles, segments of 128 rows: the first half of a segment is an even M tile.
    Every block below half the live tiles gets one, every block after an odd one, so a
    batch of at most 64 rows per expert has its live CTAs on blocks 0, 1, 2, ..."""
    tiles = m_tiles * n_tiles
    pid_m = [_raster_pid_m(t, m_tiles, n_tiles) for t in _tiles(tiles)]
    half = tiles // 2
    assert all(p % 2 == 0 for p in pid_m[:half])
    assert all(p % 2 == 1 for p in pid_m[half:])


def test_the_layers_one_expert_fc1_live_tiles_are_the_first_64_blocks() -> None:
    """DeepSeek FC1 at one expert, one row: 2 live M tiles (one 128-row segment) x 64
    column tiles; the live row's tiles (M tile 0) are blocks 0 .. 63. Without the raster
    they are the even blocks 0 .. 126."""
    live = [b for b, t in enumerate(_tiles(128)) if _raster_pid_m(t, 2, 64) == 0]
    assert live == list(range(64))
    plain = [t for t in range(128) if _raster_pid_m(t, 2, 64) == 0]
    assert plain == list(range(0, 128, 2))


def test_a_raster_that_loses_the_odd_last_tile_is_caught() -> None:
    """Planted bug: ``tiles // 2`` even blocks instead of ``ceil(tiles / 2)`` drops the last
    even tile of an odd count and gives one odd tile twice; the bijection test refuses it."""
    def floor_halves(b, tiles, select):
        evens = tiles // 2
        return select(b < evens, 2 * b, 2 * (b - evens) + 1)

    assert sorted(_tiles(7, floor_halves)) != list(range(7))


def test_the_config_names_and_checks_the_raster() -> None:
    cfg = KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True)
    assert cfg.name == "m64n64s4wsrh"
    assert KernelConfig(64, 4, tile_m=64, specialized=True).name == "m64n64s4ws"
    assert TILE_M == 2 * 64
    with pytest.raises(ValueError, match="halves"):
        KernelConfig(64, 4, tile_m=64, halves=True)  # not specialized
    with pytest.raises(ValueError, match="halves"):
        KernelConfig(64, 3, tile_m=64, specialized=True, splits=2, halves=True)
    with pytest.raises(ValueError, match="halves"):
        KernelConfig(64, 3, specialized=True, halves=True)  # 128-row tiles: no halves


def halves_twin(cfg: KernelConfig) -> KernelConfig:
    """The variant a halves variant's rows are compared with bit for bit on the GPU
    (``tests/single/test_raster_halves.py``): the same config without the raster and with
    the default count of decoded B tiles (``B_TILES``), since neither the raster nor the
    B tiles may change a row's bits (docs/contract.md s7, s8)."""
    return replace(cfg, halves=False, b_tiles=B_TILES)


def test_every_compiled_halves_variant_has_its_twin_compiled() -> None:
    """The GPU test compares each halves variant's rows bit for bit with its twin's
    (``halves_twin``); the twin must be a compiled (GPU-tested) variant of the same format,
    or the comparison has nothing to stand on."""
    from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT

    halves = [(kind, cfg) for kind, cfgs in CONFIGS_BY_FORMAT.items() for cfg in cfgs
              if cfg.halves]
    assert {cfg.name for _, cfg in halves} >= {"m64n64s4wsrh", "m64n64s6wsh", "m64n64s3wsh",
                                                "m64n64s4wsrhb4"}
    for kind, cfg in halves:
        assert halves_twin(cfg) in CONFIGS_BY_FORMAT[kind], (kind, cfg.name)
    four = KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True,
                        b_tiles=4)
    assert halves_twin(four).name == "m64n64s4wsr"  # by hand: no raster, three B tiles
