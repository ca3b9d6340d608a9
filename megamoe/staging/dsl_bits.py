"""Bit-exact float helpers for the CuTe DSL staging kernels (docs/contract.md s4).

Everything here is integer manipulation of float32 bit patterns or single IEEE float32
operations, so the kernels reproduce the Torch path (and the oracle) bit for bit:

- ``f2i``/``i2f``: reinterpret float32 <-> int32 bits;
- ``ceil_log2``/``floor_log2``: exact exponents from the bits of a float32 (normal or
  subnormal), ``NO_EXP`` for zero;
- ``pow2``: the float32 ``2**k`` for ``k`` in [-127, 127] (``2**-127`` is subnormal);
- ``sat_fp8``: float32 -> E4M3/E5M2 byte, round to nearest even, saturating finite values
  to the largest finite magnitude (the input must not be NaN; callers write 0x7F for NaN).
  Normal results round the float32 mantissa with an integer add; results below the
  smallest normal round ``|v| * 2**s`` to an integer with the float32 ``+2**23 - 2**23``
  idiom (exact: the product is a power-of-two scaling and the sum rounds to nearest even).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm

from megamoe.staging.constants import MX_EMAX_ELEM, MX_FMAX

NO_EXP = -200
_MAGIC = 8388608.0  # 2**23

# (mantissa bits, exponent bias, largest finite code, scale of the subnormal step)
FP8_PARAMS = {"e4m3": (3, 7, 0x7E, 512.0), "e5m2": (2, 15, 0x7B, 65536.0)}


def f2i(x) -> Int32:
    return Int32(llvm.bitcast(Int32.mlir_type, Float32(x).ir_value()))


def i2f(x) -> Float32:
    return Float32(llvm.bitcast(Float32.mlir_type, Int32(x).ir_value()))


def sel(cond, a, b):
    """``a if cond else b`` for dynamic Int32 operands."""
    return Int32(cutlass.select_(cond, Int32(a), Int32(b)))


@cute.jit
def floor_log2_int(m: Int32) -> Int32:
    """floor(log2(m)) for 1 <= m < 2**24 (exact: m converts to float32 exactly)."""
    return ((f2i(Float32(m)) >> 23) & 0xFF) - 127


@cute.jit
def ceil_log2(d_bits: Int32) -> Int32:
    """ceil(log2(d)) from the bits of a float32 d >= 0; NO_EXP for d == 0."""
    e = (d_bits >> 23) & 0xFF
    m = d_bits & 0x7FFFFF
    normal = e - 127 + sel(m != Int32(0), 1, 0)
    sub = sel(m > Int32(1), floor_log2_int(cutlass.max(m - 1, Int32(1))) + 1, 0) - 149
    out = sel(e > Int32(0), normal, sub)
    return sel((e == Int32(0)) & (m == Int32(0)), NO_EXP, out)


@cute.jit
def floor_log2(a_bits: Int32) -> Int32:
    """floor(log2(a)) from the bits of a float32 a >= 0; NO_EXP for a == 0."""
    e = (a_bits >> 23) & 0xFF
    m = a_bits & 0x7FFFFF
    sub = floor_log2_int(cutlass.max(m, Int32(1))) - 149
    out = sel(e > Int32(0), e - 127, sub)
    return sel((e == Int32(0)) & (m == Int32(0)), NO_EXP, out)


@cute.jit
def pow2(k: Int32) -> Float32:
    """Exact float32 2**k for k in [-127, 127]."""
    return i2f(sel(k >= Int32(-126), (cutlass.max(k, Int32(-126)) + 127) << 23, 1 << 22))


def make_sat_fp8(elem: str):
    """The saturating RNE float32 -> ``elem`` byte cast (as an Int32 in 0..255)."""
    mbits, bias, max_code, sub_scale = FP8_PARAMS[elem]
    shift = 23 - mbits
    half = (1 << (shift - 1)) - 1
    rebias = (127 - bias) << mbits
    min_normal_bits = (127 - bias + 1) << 23

    @cute.jit
    def sat_fp8(v: Float32) -> Int32:
        vb = f2i(v)
        sign = (vb >> 31) & 1
        a = vb & 0x7FFFFFFF
        rn = (a + half + ((a >> shift) & 1)) >> shift
        normal = cutlass.min(rn - rebias, Int32(max_code))
        y = i2f(a) * Float32(sub_scale)
        r = (y + Float32(_MAGIC)) - Float32(_MAGIC)
        small = Int32(r.to(Int32))
        code = sel(a < Int32(min_normal_bits), small, normal)
        return code | (sign << 7)

    return sat_fp8


E4M3_SUBNORMAL_STEP = 2.0**-9


@cute.jit
def e4m3_to_float(byte: Int32) -> Float32:
    """The exact float32 value of one E4M3 byte (docs/contract.md s4; 0x7F / 0xFF are NaN)."""
    ex = (byte >> 3) & 0xF
    m = byte & 7
    normal = i2f(((ex + 120) << 23) | (m << 20))
    v = Float32(cutlass.select_(ex == Int32(0), Float32(m) * Float32(E4M3_SUBNORMAL_STEP),
                                normal))
    v = Float32(cutlass.select_((byte & 0x80) != Int32(0), -v, v))
    return Float32(cutlass.select_((byte & 0x7F) == Int32(0x7F), i2f(Int32(0x7FC00000)), v))


E5M2_SUBNORMAL_STEP = 2.0**-16


@cute.jit
def e5m2_to_float(byte: Int32) -> Float32:
    """The exact float32 value of one E5M2 byte (docs/contract.md s4): exponent 31 is +-Inf
    (mantissa 0) or NaN."""
    ex = (byte >> 2) & 0x1F
    m = byte & 3
    normal = i2f(((ex + 112) << 23) | (m << 21))
    v = Float32(cutlass.select_(ex == Int32(0), Float32(m) * Float32(E5M2_SUBNORMAL_STEP),
                                normal))
    v = Float32(cutlass.select_(ex == Int32(31), i2f(Int32(0x7F800000)), v))
    v = Float32(cutlass.select_((ex == Int32(31)) & (m != Int32(0)), i2f(Int32(0x7FC00000)), v))
    return Float32(cutlass.select_((byte & 0x80) != Int32(0), -v, v))



E8M0_NAN_BYTE = 0xFF


@cute.jit
def e8m0_to_float(byte: Int32) -> Float32:
    """The float32 value of one E8M0 scale byte (docs/contract.md s4): ``2**(byte - 127)``
    (byte 0: the subnormal ``2**-127``), byte 0xFF NaN. ``byte`` must be 0..255 (mask a
    widened Uint8 load with ``& 0xFF``: it sign-extends)."""
    bits = Int32(cutlass.select_(byte == Int32(0), Int32(0x00400000), byte << 23))
    return i2f(Int32(cutlass.select_(byte == Int32(E8M0_NAN_BYTE), Int32(0x7FC00000), bits)))


@cute.jit
def e2m1_to_float(code: Int32) -> Float32:
    """The exact float32 value of one E2M1 code (bit 3 the sign; docs/contract.md s4):
    magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6."""
    m = code & 7
    ex = (m >> 1) & 3
    twice = Int32(cutlass.select_(ex == Int32(0), m & 1, ((m & 1) + 2) << (ex - 1)))
    v = Float32(twice) * Float32(0.5)
    return Float32(cutlass.select_((code & 8) != Int32(0), -v, v))

def make_mx_exponent(elem: str, mode: str):
    """``(e, byte)`` of one MXFP8 block from the bits of its float32 ``amax`` (docs/contract.md
    s4): ``rceil`` ``e = ceil(log2(amax / fmax))`` (one float32 division), ``floor`` ``e =
    floor(log2(amax)) - emax_elem``; clamped to [-127, 127]; byte ``e + 127``, 0 for an
    all-zero block, 0xFF for a block holding NaN/Inf."""
    fmax = MX_FMAX[elem]
    emax = MX_EMAX_ELEM[elem]

    @cute.jit
    def mx_exponent(amax_b: Int32):
        bad = amax_b >= Int32(0x7F800000)
        zero = amax_b == Int32(0)
        e = Int32(NO_EXP)
        if cutlass.const_expr(mode == "rceil"):
            e = ceil_log2(f2i(i2f(amax_b) / Float32(fmax)))
        else:
            e = floor_log2(amax_b) - emax
        e = cutlass.min(cutlass.max(e, Int32(-127)), Int32(127))
        byte = sel(zero, 0, e + 127)
        return e, sel(bad, 0xFF, byte)

    return mx_exponent
