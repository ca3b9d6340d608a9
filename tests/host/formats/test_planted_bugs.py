"""Planted bugs are caught: each broken variant of a format rule makes a golden check fail.

Issue 2 names four bugs that must be caught (scale rounded by floor instead of
ceil, ties away from zero, nibble order swapped, tiny path skipped); a few
more cover saturation and the sign of E2M1 zero. Each test swaps one internal
of ``oracle.formats`` for a broken version (pytest monkeypatch, undone after
the test) and asserts that the same checker that passes on the real oracle
now reports mismatches.
"""

from __future__ import annotations

import pytest
import torch

from oracle import formats as F
from oracle.formats import casts, e8m0, mx, nvfp4, safe_fp8
from oracle.formats.constants import E2M1, ElementFormat

from .golden import check_casts, check_mx, check_nvfp4, check_safe_fp8

_ROUNDING_USERS = (casts, mx, nvfp4, safe_fp8)


def _mxfp8_mismatches(elem: str = "e4m3") -> list:
    return check_mx("mxfp8.json", elem, lambda x, mode: F.quantize_mxfp8(x, elem, mode))


def _round_ties_away_(v: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """Broken: round half away from zero (otherwise the same saturating grid rounding)."""
    a = v.abs().clamp(max=fmt.fmax).double()  # float64: a / quantum + 0.5 is exact
    _, ex = torch.frexp(a)
    quantum = torch.ldexp(torch.ones_like(a), (ex - 1).clamp(min=fmt.emin) - fmt.mant_bits)
    r = torch.floor(a / quantum + 0.5) * quantum
    return v.copy_(torch.copysign(r, v.double()))



_E2M1_CODE_OF_TWICE_VALUE = torch.tensor([0, 1, 2, 3, 4, 0, 5, 0, 6, 0, 0, 0, 7], dtype=torch.uint8)


def _e2m1_codes_ties_away_(v: torch.Tensor) -> torch.Tensor:
    """Broken E2M1 encoder: ties away from zero (test-side code mapping of the grid values)."""
    r = _round_ties_away_(v.nan_to_num_(nan=0.0), E2M1)
    codes = _E2M1_CODE_OF_TWICE_VALUE[(r.abs() * 2).long()]
    return codes | ((r < 0) & (codes != 0)).to(torch.uint8) << 3


def test_real_oracle_passes_the_checks_used_below() -> None:
    assert _mxfp8_mismatches() == []
    assert check_casts("e4m3", F.cast_e4m3) == []


def test_scale_floor_instead_of_ceil_is_caught(monkeypatch) -> None:
    monkeypatch.setattr(e8m0, "ceil_log2_f32", e8m0.floor_log2_f32)
    assert _mxfp8_mismatches("e4m3")
    assert _mxfp8_mismatches("e5m2")


def test_ties_away_from_zero_is_caught(monkeypatch) -> None:
    for module in _ROUNDING_USERS:
        monkeypatch.setattr(module, "round_to_grid_", _round_ties_away_)
    for module in (casts, mx, nvfp4):
        monkeypatch.setattr(module, "e2m1_codes_", _e2m1_codes_ties_away_)
    for fmt, cast in (("e4m3", F.cast_e4m3), ("e5m2", F.cast_e5m2), ("e2m1", F.e2m1_encode)):
        bad = check_casts(fmt, cast)
        assert bad and all(case.startswith("tie ") for case, *_ in bad), fmt
    assert _mxfp8_mismatches()
    assert check_nvfp4(lambda x, g: F.quantize_nvfp4(x, g))
    assert check_mx("mxfp4.json", "cases", lambda x, mode: F.quantize_mxfp4(x, mode))
    assert check_safe_fp8(F.safe_fp8_quantize)


def test_missing_saturation_is_caught(monkeypatch) -> None:
    real = casts.round_to_grid_

    def broken(v: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
        big = v.abs() > fmt.fmax
        return real(v, fmt).masked_fill_(big, float("nan"))

    monkeypatch.setattr(casts, "round_to_grid_", broken)
    bad = check_casts("e4m3", F.cast_e4m3)
    assert any(case.startswith(("saturate", "inf")) for case, *_ in bad)


def _pack_swapped(codes: torch.Tensor) -> torch.Tensor:
    """Broken: even element in the HIGH nibble."""
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return pairs[..., 1] | (pairs[..., 0] << 4)


def test_nibble_order_swapped_is_caught(monkeypatch) -> None:
    monkeypatch.setattr(mx, "pack_fp4", _pack_swapped)
    monkeypatch.setattr(nvfp4, "pack_fp4", _pack_swapped)
    assert check_mx("mxfp4.json", "cases", lambda x, mode: F.quantize_mxfp4(x, mode))
    assert check_nvfp4(lambda x, g: F.quantize_nvfp4(x, g))


def test_tiny_path_skipped_is_caught(monkeypatch) -> None:
    real = safe_fp8.safe_fp8_scales

    def no_tiny_path(amax: torch.Tensor):
        _, q, tiny = real(amax)
        inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(448.0, dtype=torch.float32)
        d = torch.maximum(amax * inv, torch.tensor(1e-30, dtype=torch.float32))
        return d, q, torch.zeros_like(tiny)

    monkeypatch.setattr(safe_fp8, "safe_fp8_scales", no_tiny_path)
    bad = check_safe_fp8(F.safe_fp8_quantize)
    assert any(name == "amplitude_1e-35" for name, *_ in bad)


def test_e2m1_signed_zero_is_caught(monkeypatch) -> None:
    """Broken (torchao's behaviour): a negative value rounding to 0 keeps the sign (code 8)."""
    real = casts.e2m1_codes_

    def signed_zero(v: torch.Tensor) -> torch.Tensor:
        negative = torch.signbit(v)
        return real(v) | (negative.to(torch.uint8) << 3)

    monkeypatch.setattr(casts, "e2m1_codes_", signed_zero)
    monkeypatch.setattr(nvfp4, "e2m1_codes_", signed_zero)
    assert check_casts("e2m1", F.e2m1_encode)
    assert check_nvfp4(lambda x, g: F.quantize_nvfp4(x, g))


@pytest.mark.parametrize("variant", ["rceil_via_float_log2"])
def test_rceil_through_float32_log2_is_caught(monkeypatch, variant) -> None:
    """Broken: ceil(log2(d)) computed with float32 torch.log2 (the boundary artifact)."""

    def ceil_log2_float(v: torch.Tensor) -> torch.Tensor:
        return torch.ceil(torch.log2(v)).nan_to_num(neginf=-150).to(torch.int32)

    monkeypatch.setattr(e8m0, "ceil_log2_f32", ceil_log2_float)
    bad = _mxfp8_mismatches()
    assert any("above" in name for name, *_ in bad), variant
