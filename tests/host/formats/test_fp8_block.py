"""FP8 with float32 block scales (docs/contract.md s12): the row (1 x 128) and tile (128 x 128)
quantizers reproduce the golden blocks of fixtures/make_golden.py bit for bit; dequantization
is ``float32(payload) * d``; bad shapes are refused by name; and the golden blocks tell the
rule from its near misses (a reciprocal multiply instead of the division, no 1e-30 floor)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from oracle import formats as F
from oracle.formats.casts import round_to_grid_
from oracle.formats.constants import E4M3

from .golden import check_fp8_block, f32_from_hex, load


@pytest.mark.contract("s12.fp8-block-format")
def test_row_blocks_match_the_golden_vectors() -> None:
    assert check_fp8_block(F.quantize_fp8_rows) == []


@pytest.mark.contract("s12.fp8-block-format")
def test_a_tile_takes_one_scale_over_its_128_by_128_elements() -> None:
    """Four golden blocks, each repeated down the 128 rows of one tile of a 256 x 256 matrix:
    every tile's scale and every row's payload are that block's golden bytes."""
    cases = {c["name"]: c for c in load("fp8_block.json")["cases"]}
    names = ("amplitude_1.0", "amplitude_3e+38", "all_zero_signed", "nan_block")
    w = torch.empty(256, 256)
    for n, name in enumerate(names):
        i, j = divmod(n, 2)
        w[128 * i : 128 * (i + 1), 128 * j : 128 * (j + 1)] = f32_from_hex(cases[name]["x"])
    payload, d = F.quantize_fp8_tiles(w)
    assert d.shape == (2, 2) and payload.shape == (256, 256)
    for n, name in enumerate(names):
        i, j = divmod(n, 2)
        bits = d[i, j : j + 1].view(torch.int32).item() & 0xFFFFFFFF
        assert bits == int(cases[name]["d"], 16), name
        tile = payload[128 * i : 128 * (i + 1), 128 * j : 128 * (j + 1)].view(torch.uint8)
        assert (tile == torch.tensor(cases[name]["payload"], dtype=torch.uint8)).all(), name


@pytest.mark.contract("s12.fp8-block-format")
def test_dequantize_is_the_payload_value_times_d_in_float32() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 2, 256, generator=g) * torch.tensor([1e-3, 1.0, 1e4]).view(3, 1, 1)
    payload, d = F.quantize_fp8_rows(x)
    values = payload.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    want = (values.reshape(3, 2, 2, 128) * d.numpy()[..., None]).reshape(3, 2, 256)
    assert np.array_equal(F.dequantize_fp8_rows(payload, d).numpy(), want)
    w = torch.randn(2, 256, 128, generator=g)
    wp, wd = F.quantize_fp8_tiles(w)
    back = F.dequantize_fp8_tiles(wp, wd)
    assert back.shape == w.shape
    assert float((back - w).norm() / w.norm()) < 0.04  # e4m3: 3 mantissa bits


def test_bad_shapes_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^x: last dim must be a multiple of 128"):
        F.quantize_fp8_rows(torch.zeros(2, 96))
    with pytest.raises(ValueError, match=r"^w: the last two dims must be multiples of the FP8 tile"):
        F.quantize_fp8_tiles(torch.zeros(64, 128))
    p, d = F.quantize_fp8_rows(torch.ones(2, 256))
    with pytest.raises(ValueError, match=r"^scales: one float32 per 128-block"):
        F.dequantize_fp8_rows(p, d[:, :1])
    with pytest.raises(ValueError, match=r"^payload: wrong dtype \(expected torch.float8_e4m3fn, got torch.uint8\)"):
        F.dequantize_fp8_rows(p.view(torch.uint8), d)


def _reciprocal_variant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The near miss of FlashInfer's A2 epilogue: ``x * (1 / d)`` instead of ``x / d``."""
    amax = x.abs().amax(dim=-1, keepdim=True)
    d = F.fp8_block_scale(amax)
    q = round_to_grid_(x * (1.0 / d), E4M3)
    return q.to(torch.float8_e4m3fn), d


def _no_floor_variant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax(dim=-1, keepdim=True)
    d = amax / 448.0
    d = torch.where(torch.isfinite(amax), d, torch.nan)
    q = round_to_grid_(x / torch.where(d == 0, 1.0, d), E4M3)
    return q.to(torch.float8_e4m3fn), d


@pytest.mark.contract("s12.fp8-block-format")
@pytest.mark.parametrize("variant", [_reciprocal_variant, _no_floor_variant],
                         ids=["reciprocal-multiply", "no-floor"])
def test_the_golden_blocks_tell_the_rule_from_its_near_misses(variant) -> None:
    mismatches = check_fp8_block(variant)
    assert mismatches, "the golden vectors must catch this variant"
