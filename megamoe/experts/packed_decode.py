"""Weight decode to bf16 pairs by bit placement and two bf16x2 products (CuTe DSL, sm_90).

The MX GEMM mainloop (``mxfp4_gemm_kernel``) turns each 32-bit word of packed weights into
bf16x2 words (two elements along K) and multiplies them by their block scale, all in
registers: no table lookups in shared memory and no float32 -> bf16 conversions, the two
costs that bounded the earlier table decode.

Element ``x`` of a format with ``p`` mantissa bits and exponent bias ``b`` has the bits
``s | e | m``. Placing them in a bf16 as ``s`` at bit 15 and ``e | m`` right below the
bf16 exponent's low bits (``m`` on mantissa bits ``6 - p + 1 .. 6``) gives the bf16 whose
value is exactly ``x * 2**-(127 - b)``: for ``e > 0`` the exponent field is ``e`` (bias
127 instead of ``b``) and the mantissa is ``m``; for ``e = 0`` the bf16 is subnormal with
mantissa ``m``, the same ``m * 2**(1 - b - p)`` scaled the same way. One bf16x2 product
with ``2**(127 - b)`` (``REBIAS``; exact: the result is normal, at most 4 significant bits)
restores ``x``; a second product with the block scale (a power of two for E8M0; an E4M3
value for NVFP4) rounds once to bf16. That is the value the table decode computed (float32
``x * scale``, exact, then one rounding to bf16): ``x`` has at most 2 (E2M1) or 4 (E4M3)
significant bits and the scale 1 or 4, so the float32 product is exact and both paths round
the same real number once (CONTRACTS.md s4; the exhaustive decode tests in
``tests/single/`` compare every code under every scale byte with the oracle).

E4M3 NaN (``e | m`` all ones) has no such placement; ``e4m3_pair_bits``' callers test a
word for NaN bytes (``has_e4m3_nan``) and decode those words byte by byte.

PTX ``mul.rn.bf16x2`` (sm_90) keeps subnormal inputs and outputs (bf16 has no ``.ftz``);
the CuTe DSL 4.3.5 has no bf16x2 arithmetic, hence the inline PTX.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

E2M1_REBIAS_BF16X2 = 0x7E807E80
"""``2**126`` in both halves: E2M1 (bias 1) placed at bf16 bias 127."""
E4M3_REBIAS_BF16X2 = 0x7B807B80
"""``2**120`` in both halves: E4M3 (bias 7) placed at bf16 bias 127."""


@dsl_user_op
def bf16x2_mul(a: Int32, b: Int32, *, loc=None, ip=None) -> Int32:
    """Lane-wise ``a * b`` of two bf16x2 words, rounded to nearest even (``mul.rn.bf16x2``)."""
    return Int32(
        llvm.inline_asm(
            T.i32(),
            [Int32(a).ir_value(loc=loc, ip=ip), Int32(b).ir_value(loc=loc, ip=ip)],
            "mul.rn.bf16x2 $0, $1, $2;",
            "=r,r,r",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )


@cute.jit
def bf16_pair(bits16: Int32) -> Int32:
    """A bf16 bit pattern (low 16 bits) in both halves of a word."""
    lo = bits16 & 0xFFFF
    return lo | (lo << 16)


@cute.jit
def e2m1_pair_bits(x: Int32, j: cutlass.Constexpr[int]) -> Int32:
    """Codes ``2j`` (low nibble of byte ``j``) and ``2j + 1`` of the packed word ``x`` as
    bf16x2 bits, each worth ``e2m1(code) * 2**-126`` (module docstring)."""
    lo = (x >> (8 * j)) & 0xF
    hi = (x >> (8 * j + 4)) & 0xF
    p = lo | (hi << 16)
    return ((p & 0x70007) << 6) | ((p & 0x80008) << 12)


@cute.jit
def e4m3_pair_bits(x: Int32, j: cutlass.Constexpr[int]) -> Int32:
    """Bytes ``2j`` and ``2j + 1`` of the word ``x`` (E4M3, not NaN) as bf16x2 bits, each
    worth ``e4m3(byte) * 2**-120`` (module docstring)."""
    y = x >> (16 * j)
    return (((y & 0x7F) << 4) | ((y & 0x80) << 8)
            | ((y & 0x7F00) << 12) | ((y & 0x8000) << 16))


@cute.jit
def has_e4m3_nan(x: Int32) -> cutlass.Boolean:
    """Whether any byte of ``x`` is an E4M3 NaN (``0x7F`` or ``0xFF``): adding 1 to each
    byte's low 7 bits carries into bit 7 exactly for 0x7F."""
    return (((x & 0x7F7F7F7F) + 0x01010101) & (0x80808080 - (1 << 32))) != Int32(0)
