"""Hypothesis properties of the oracle's number formats (docs/contract.md s4), CPU.

Inputs: random shapes and float32 values with magnitudes from the smallest
subnormal to ~3e38, both independent per element and coherent per block (a
block exponent times a mantissa). Reference arithmetic in the checks is
float64 / Python ints, never the oracle's own helpers.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oracle import formats as F

ELEM = {
    "e4m3": (448.0, 3, -6, 8),  # fmax, mantissa bits, emin, emax_elem
    "e5m2": (57344.0, 2, -14, 15),
    "e2m1": (6.0, 1, 0, 2),
}
FINITE_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def float32_blocks(draw, block: int = 32) -> torch.Tensor:
    """A finite float32 tensor [rows, nblocks * block]."""
    rows = draw(st.integers(1, 3))
    nblocks = draw(st.integers(1, 3))
    shape = (rows, nblocks * block)
    if draw(st.booleans()):
        arr = draw(hnp.arrays(np.float32, shape, elements=FINITE_F32))
    else:
        mant = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0)))
        exps = draw(hnp.arrays(np.int64, (rows, nblocks, 1), elements=st.integers(-150, 126)))
        spread = draw(hnp.arrays(np.int64, (rows, nblocks, block), elements=st.integers(-30, 0)))
        scaled = mant.reshape(rows, nblocks, block) * np.exp2((exps + spread).astype(np.float64))
        arr = scaled.reshape(shape).astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(arr))


def _scale_exponents(scale: torch.Tensor) -> np.ndarray:
    return scale.numpy().astype(np.int64) - 127


def _half_step(scaled_abs: np.ndarray, mant: int, emin: int) -> np.ndarray:
    """Half the grid spacing at |v| (in the scaled domain), float64, exact powers of two."""
    with np.errstate(divide="ignore"):
        binade = np.floor(np.log2(np.where(scaled_abs > 0, scaled_abs, 1.0)))
    # np.log2 may be off by one just below a power of two: correct with exact comparisons
    binade = np.where(np.exp2(binade) > scaled_abs, binade - 1, binade)
    binade = np.where(np.exp2(binade + 1) <= scaled_abs, binade + 1, binade)
    return np.exp2(np.maximum(binade, emin) - mant - 1)


@pytest.mark.contract("s4.mxfp8-rceil")
@given(x=float32_blocks(), elem=st.sampled_from(["e4m3", "e5m2"]))
def test_rceil_scale_is_the_smallest_power_of_two_without_saturation(x, elem) -> None:
    fmax = ELEM[elem][0]
    _, scale = F.quantize_mxfp8(x, elem, "rceil")
    e = _scale_exponents(scale)
    amax = x.double().abs().reshape(*scale.shape, 32).amax(-1).numpy()
    d = (x.abs().reshape(*scale.shape, 32).amax(-1) / torch.tensor(fmax)).double().numpy()
    nonzero = amax > 0
    free = nonzero & (e > -127)
    # 2**e >= d and 2**(e-1) < d; with d rounded once, amax * 2**-e <= fmax (no saturation) ...
    assert np.all(np.exp2(e[free].astype(np.float64)) >= d[free])
    assert np.all(np.exp2(e[free] - 1.0) < d[free])
    assert np.all(amax[free] * np.exp2(-e[free].astype(np.float64)) <= fmax)
    # ... and one power of two smaller would saturate the largest element
    assert np.all(amax[free] * np.exp2(1.0 - e[free]) > fmax)
    # clamped at -127 only when the exact exponent is below it
    assert np.all(d[nonzero & (e == -127)] <= 2.0**-127)
    assert np.all(scale.numpy()[~nonzero] == 0)


@pytest.mark.contract("s4.mx-special-blocks", "s4.mxfp4", "s4.mxfp8-floor")
@given(x=float32_blocks(), elem=st.sampled_from(["e4m3", "e5m2", "e2m1"]))
def test_floor_scale_matches_the_ocp_formula(x, elem) -> None:
    emax_elem = ELEM[elem][3]
    if elem == "e2m1":
        _, scale = F.quantize_mxfp4(x, "floor")
    else:
        _, scale = F.quantize_mxfp8(x, elem, "floor")
    amax = x.double().abs().reshape(*scale.shape, 32).amax(-1).numpy().reshape(-1)
    expected = []
    for a in amax.tolist():
        if a == 0:
            expected.append(0)
        else:
            _, ex = math.frexp(a)  # a = m * 2**ex, m in [0.5, 1): floor(log2 a) = ex - 1
            expected.append(min(max(ex - 1 - emax_elem, -127), 127) + 127)
    assert scale.numpy().reshape(-1).tolist() == expected


def _quant_dequant(x: torch.Tensor, elem: str, mode: str):
    if elem == "e2m1":
        packed, scale = F.quantize_mxfp4(x, mode)
        return (packed, scale), F.dequantize_mxfp4(packed, scale), scale
    payload, scale = F.quantize_mxfp8(x, elem, mode)
    return (payload, scale), F.dequantize_mxfp8(payload, scale), scale


@pytest.mark.contract("s4.mxfp8-floor")
@given(
    x=float32_blocks(),
    elem=st.sampled_from(["e4m3", "e5m2", "e2m1"]),
    mode=st.sampled_from(["rceil", "floor"]),
)
def test_dequant_of_quant_is_within_half_a_grid_step(x, elem, mode) -> None:
    """Exact check in float64 (payload value and 2**e are exact), then float32 dequant = exact rounded.

    A dequantized value can exceed float32 (e.g. 1.9375 * 2**127 -> payload 256 * 2**120 = 2**128):
    ``dequantize`` then returns Inf, which is that value rounded to float32.
    """
    fmax, mant, emin, _ = ELEM[elem]
    (payload, _), back, scale = _quant_dequant(x, elem, mode)
    if elem == "e2m1":
        vals = F.e2m1_decode(F.unpack_fp4(payload)).double().numpy()
    else:
        vals = payload.double().numpy()
    e = np.repeat(_scale_exponents(scale), 32, axis=-1).astype(np.float64)
    xs = x.double().numpy()
    scaled = xs * np.exp2(-e)  # exact
    unsaturated = np.abs(scaled) <= fmax
    bound = _half_step(np.abs(scaled), mant, emin)
    assert np.all(np.abs(vals - scaled)[unsaturated] <= bound[unsaturated])
    assert np.all(vals[~unsaturated] == np.sign(scaled[~unsaturated]) * fmax)
    with np.errstate(over="ignore"):
        exact_f32 = (vals * np.exp2(e)).astype(np.float32)
    np.testing.assert_array_equal(back.numpy(), exact_f32)


@given(
    x=float32_blocks(),
    elem=st.sampled_from(["e4m3", "e5m2", "e2m1"]),
    mode=st.sampled_from(["rceil", "floor"]),
)
def test_quantizing_a_dequantized_tensor_reproduces_the_bytes(x, elem, mode) -> None:
    fmax = ELEM[elem][0]
    (p1, s1), back, _ = _quant_dequant(x, elem, mode)
    assume(bool(torch.isfinite(back).all()))  # 2**128 and above dequantizes to Inf (see above)
    (p2, s2), back2, _ = _quant_dequant(back, elem, mode)
    assert torch.equal(back2, back)  # always idempotent in value
    mags = F.e2m1_decode(F.unpack_fp4(p1)).abs() if elem == "e2m1" else p1.float().abs()
    block_max = mags.reshape(*s1.shape, 32).amax(-1)
    # rceil may pick a smaller exponent when the largest payload is exactly fmax / 2
    # (then the whole block scales by 2 and dequantizes to the same values)
    same = (block_max != fmax / 2) | (s1 == 0) if mode == "rceil" else torch.ones_like(s1, dtype=torch.bool)
    assert torch.equal(s1[same], s2[same])
    assert torch.equal(s2[~same], s1[~same] - 1)
    if elem == "e2m1":
        c1, c2 = F.unpack_fp4(p1), F.unpack_fp4(p2)
    else:
        c1, c2 = p1.view(torch.uint8), p2.view(torch.uint8)
    rows_same = same.repeat_interleave(32, dim=-1)
    assert torch.equal(c1[rows_same], c2[rows_same])


def _flip_sign_bytes(b: torch.Tensor, sign_bit: int) -> torch.Tensor:
    return b ^ sign_bit


@given(x=float32_blocks(), mode=st.sampled_from(["rceil", "floor"]))
def test_sign_symmetry(x, mode) -> None:
    for elem in ("e4m3", "e5m2"):
        p, s = F.quantize_mxfp8(x, elem, mode)
        pn, sn = F.quantize_mxfp8(-x, elem, mode)
        assert torch.equal(s, sn)
        assert torch.equal(pn.view(torch.uint8), p.view(torch.uint8) ^ 0x80)
    codes = F.unpack_fp4(F.quantize_mxfp4(x, mode)[0])
    codes_neg = F.unpack_fp4(F.quantize_mxfp4(-x, mode)[0])
    assert torch.equal(codes_neg, torch.where(codes & 7 == 0, codes, codes ^ 8))
    packed, scales = F.quantize_nvfp4(x)
    packed_n, scales_n = F.quantize_nvfp4(-x)
    assert torch.equal(scales.view(torch.uint8), scales_n.view(torch.uint8))
    c, cn = F.unpack_fp4(packed), F.unpack_fp4(packed_n)
    assert torch.equal(cn, torch.where(c & 7 == 0, c, c ^ 8))
    sp, sd = F.safe_fp8_quantize(x)
    spn, sdn = F.safe_fp8_quantize(-x)
    assert torch.equal(sd, sdn) and torch.equal(spn.view(torch.uint8), sp.view(torch.uint8) ^ 0x80)


@pytest.mark.contract("s4.element-casts")
@given(values=hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(width=32)))
def test_element_casts_agree_with_ml_dtypes(values) -> None:
    """RNE like ml_dtypes, plus the contract's saturation, NaN byte and unsigned E2M1 zero."""
    x = torch.from_numpy(values.copy())
    for cast, np_dtype, fmax, nan_byte, mask in (
        (F.cast_e4m3, ml_dtypes.float8_e4m3fn, 448.0, 0x7F, 0xFF),
        (F.cast_e5m2, ml_dtypes.float8_e5m2, 57344.0, 0x7F, 0xFF),
        (F.e2m1_encode, ml_dtypes.float4_e2m1fn, 6.0, 0, 0x0F),
    ):
        clipped = np.clip(np.nan_to_num(values, nan=0.0, posinf=fmax, neginf=-fmax), -fmax, fmax)
        ref = clipped.astype(np_dtype).view(np.uint8) & mask
        if mask == 0x0F:
            ref = np.where(ref & 7 == 0, 0, ref)
        ref = np.where(np.isnan(values), nan_byte, ref)
        np.testing.assert_array_equal(cast(x).view(torch.uint8).numpy(), ref)


@given(x=float32_blocks(block=16), use_g=st.booleans())
def test_nvfp4_dequant_is_close_and_requant_is_idempotent(x, use_g) -> None:
    amax = x.abs().amax(dim=1, keepdim=True)
    g = F.nvfp4_global_scale(amax) if use_g else 1.0
    # rows whose global scale would be 0 are rejected by design (test_bad_inputs)
    assume(not use_g or bool(((g > 0) & torch.isfinite(g)).all()))
    packed, scales = F.quantize_nvfp4(x, g)
    back = F.dequantize_nvfp4(packed, scales, g)
    assert torch.isfinite(back).all()
    if not use_g:
        # g = 1: every step is exact, so re-quantizing the dequantized values is the identity
        p2, s2 = F.quantize_nvfp4(back)
        assert torch.equal(F.dequantize_nvfp4(p2, s2), back)


@given(x=float32_blocks(block=8))
def test_safe_fp8_dequant_within_half_step_and_d_positive(x) -> None:
    payload, d = F.safe_fp8_quantize(x)
    assert bool((d > 0).all())
    back = F.safe_fp8_dequantize(payload, d).double().numpy()
    scaled = payload.double().abs().numpy()
    assert np.all(scaled <= 448.0)
    # error measured in the payload domain: |x * q - payload| within half a step (plus the
    # one float32 rounding of the scaling itself, at most half an ulp of the scaled value)
    d64 = d.double().numpy()[:, None]
    xs = x.double().numpy()
    scaled_x = np.abs(xs) / d64
    err = np.abs(back - xs) / d64
    bound = _half_step(np.minimum(scaled_x, 448.0), 3, -6) + scaled_x * 2.0**-23 + 1e-300
    unsat = scaled_x <= 448.0 * (1 - 2.0**-20)
    assert np.all(err[unsat] <= bound[unsat] * (1 + 2.0**-20))
