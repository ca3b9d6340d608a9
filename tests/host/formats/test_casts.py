"""Element casts agree with ml_dtypes exhaustively (docs/contract.md s4: RNE, saturation, NaN).

ml_dtypes rounds to nearest even but does not saturate (E4M3 overflow -> NaN,
E5M2 overflow -> Inf) and keeps the sign of E2M1 zero, so the reference is
``ml_dtypes(clip(x, -fmax, fmax))`` with the contract's NaN byte and unsigned
E2M1 zero applied on top.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from oracle import formats as F

CASES = [
    ("e4m3", F.cast_e4m3, ml_dtypes.float8_e4m3fn, 448.0, F.E4M3_NAN_BYTE),
    ("e5m2", F.cast_e5m2, ml_dtypes.float8_e5m2, 57344.0, F.E5M2_NAN_BYTE),
    ("e2m1", F.e2m1_encode, ml_dtypes.float4_e2m1fn, 6.0, 0),
]


def _reference_bytes(x32: np.ndarray, np_dtype, fmax: float, nan_byte: int, fmt: str) -> np.ndarray:
    clipped = np.clip(np.nan_to_num(x32, nan=0.0, posinf=fmax, neginf=-fmax), -fmax, fmax)
    ref = clipped.astype(np_dtype).view(np.uint8).copy()
    if fmt == "e2m1":
        ref &= 0x0F
        ref[(ref & 0x7) == 0] = 0  # code 0 never carries a sign
    ref[np.isnan(x32)] = nan_byte
    return ref


def _all_16bit(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.contract("s4.element-casts")
@pytest.mark.parametrize(("fmt", "cast", "np_dtype", "fmax", "nan_byte"), CASES)
@pytest.mark.parametrize("src", [torch.bfloat16, torch.float16])
def test_cast_matches_ml_dtypes_on_every_16bit_input(fmt, cast, np_dtype, fmax, nan_byte, src) -> None:
    x = _all_16bit(src)
    got = cast(x).view(torch.uint8).numpy()
    ref = _reference_bytes(x.float().numpy(), np_dtype, fmax, nan_byte, fmt)
    bad = np.nonzero(got != ref)[0]
    assert bad.size == 0, [(float(x[i]), int(got[i]), int(ref[i])) for i in bad[:10]]


@pytest.mark.parametrize(("fmt", "cast", "np_dtype", "fmax", "nan_byte"), CASES)
def test_cast_is_identity_on_every_representable_value(fmt, cast, np_dtype, fmax, nan_byte) -> None:
    """Every byte/code, decoded by ml_dtypes, casts back to itself (NaN/Inf/-0 as the contract says)."""
    codes = np.arange(16 if fmt == "e2m1" else 256, dtype=np.uint8)
    values = np.frombuffer(codes.tobytes(), dtype=np_dtype).astype(np.float32)
    got = cast(torch.from_numpy(values)).view(torch.uint8).numpy()
    expected = codes.copy()
    if fmt == "e2m1":
        expected[8] = 0  # -0.0 encodes as code 0
    if fmt == "e5m2":
        expected[0x7C], expected[0xFC] = 0x7B, 0xFB  # +-Inf saturate
    nan = np.isnan(values)
    expected[nan] = nan_byte
    np.testing.assert_array_equal(got, expected)
    assert nan.sum() == {"e4m3": 2, "e5m2": 6, "e2m1": 0}[fmt]


def test_e5m2_infinity_saturates() -> None:
    x = torch.tensor([float("inf"), -float("inf")])
    assert F.cast_e5m2(x).view(torch.uint8).tolist() == [0x7B, 0xFB]
    assert F.cast_e4m3(x).view(torch.uint8).tolist() == [0x7E, 0xFE]
    assert F.e2m1_encode(x).tolist() == [7, 15]


@pytest.mark.contract("s4.element-casts")
def test_nan_gets_the_canonical_byte_whatever_its_sign() -> None:
    nans = torch.tensor([0x7FC00000, 0xFFC00000 - 2**32, 0x7F800001], dtype=torch.int32).view(torch.float32)
    assert F.cast_e4m3(nans).view(torch.uint8).tolist() == [0x7F] * 3
    assert F.cast_e5m2(nans).view(torch.uint8).tolist() == [0x7F] * 3
    assert F.e2m1_encode(nans).tolist() == [0] * 3


_FP8_TORCH = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _grid(fmt: str) -> torch.Tensor:
    """Sorted non-negative finite values of a format, float64."""
    if fmt == "e2m1":
        vals = F.e2m1_decode(torch.arange(8, dtype=torch.uint8)).double()
    else:
        vals = torch.arange(128, dtype=torch.uint8).view(_FP8_TORCH[fmt]).double()
    return torch.unique(vals[torch.isfinite(vals)])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_float64_input_is_rounded_once(fmt) -> None:
    """A float64 one ulp above a tie rounds up; rounding through float32 first would hit the tie.

    (torch's own float64 -> float8 conversion double-rounds: it returns 0.5 for
    nextafter(0.53125) in E4M3; the oracle must not.)
    """
    cast = {"e4m3": F.cast_e4m3, "e5m2": F.cast_e5m2, "e2m1": F.e2m1_encode}[fmt]
    vals = _grid(fmt)
    lo, hi = vals[:-1], vals[1:]
    mid = (lo + hi) / 2
    above = torch.nextafter(mid, torch.full_like(mid, float("inf")))
    below = torch.nextafter(mid, torch.zeros_like(mid))
    assert torch.equal(above.float().double(), mid)  # the float32 detour lands on the tie
    decode = F.e2m1_decode if fmt == "e2m1" else (lambda t: t.double())
    assert torch.equal(decode(cast(above)).double(), hi)
    assert torch.equal(decode(cast(below)).double(), lo)
    assert torch.equal(decode(cast(-above)).double(), -hi)


def test_casts_do_not_modify_input_and_accept_strided_views() -> None:
    x = torch.linspace(-500, 500, 64).reshape(8, 8)
    before = x.clone()
    view = x.t()
    got = F.cast_e4m3(view)
    assert torch.equal(x, before)
    assert torch.equal(got.view(torch.uint8), F.cast_e4m3(view.contiguous()).view(torch.uint8))


def test_e2m1_decode_matches_ml_dtypes() -> None:
    codes = np.arange(16, dtype=np.uint8)
    ref = np.frombuffer(codes.tobytes(), dtype=ml_dtypes.float4_e2m1fn).astype(np.float32)
    got = F.e2m1_decode(torch.from_numpy(codes)).numpy()
    np.testing.assert_array_equal(got, ref)
    assert np.array_equal(np.signbit(got), np.signbit(ref))
