"""Weight decode to bf16 pairs in registers (CuTe DSL, sm_90): byte permutes for E2M1, bit
placement for E4M3, then one bf16x2 product with the block scale.

The MX GEMM mainloop (``mxfp4_gemm_kernel``) turns each 32-bit word of packed weights into
bf16x2 words (two elements along K) and multiplies them by their block scale, all in
registers: no table lookups in shared memory and no float32 -> bf16 conversions, the two
costs that bounded the earlier table decode.

E2M1 (MXFP4, NVFP4): the eight magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are all exact bf16
values, so their low and high bf16 bytes are two 8-entry tables of two 32-bit words each
(``E2M1_LO_LUT``, ``E2M1_HI_LUT``). One ``prmt.b32`` looks up four codes' bytes at once (its
selector nibbles are the codes' magnitude bits; the nibble's top bit, which would switch
``prmt`` to sign replication, is masked off), a third adds the sign bytes (``SIGN_LUT``
indexed by each code's sign bit), and two more interleave low and high bytes into two
bf16x2 words: 17 integer instructions per word of eight codes (``e2m1_word_bf16x2``),
against 32 for the bit placement below (session 20, docs/perf.md). The bf16 is exactly the
code's value; one bf16x2 product with the block scale then rounds once.

E4M3 (MXFP8): element ``x`` with ``p`` mantissa bits and exponent bias ``b`` has the bits
``s | e | m``. Placing them in a bf16 as ``s`` at bit 15 and ``e | m`` right below the
bf16 exponent's low bits (``m`` on mantissa bits ``6 - p + 1 .. 6``) gives the bf16 whose
value is exactly ``x * 2**-(127 - b)``: for ``e > 0`` the exponent field is ``e`` (bias
127 instead of ``b``) and the mantissa is ``m``; for ``e = 0`` the bf16 is subnormal with
mantissa ``m``, the same ``m * 2**(1 - b - p)`` scaled the same way. One ``prmt`` puts a
word's two bytes in the high bytes of the halves, and a shift and two masks place them. The
rebias ``2**(127 - b)`` = ``2**120`` is folded into the
block scale (``e4m3_block_scale``): for an E8M0 byte ``B <= E4M3_FOLD_MAX_BYTE`` the word
holds ``2**(B - 127 + 120)``, a normal bf16, and one bf16x2 product of the placed bits with
it is the real number ``x * 2**(B - 127)`` rounded once, the same number and the same
single rounding as rebiasing first (``x``, exact) and multiplying by the scale after.
Larger bytes (their folded scale would pass bf16's range) and 0xFF (NaN) keep the scale
itself with both sign bits set, which sends the word to the two-product path (rebias by
``E4M3_REBIAS_BF16X2``, exact, then the scale).

Either way the product with the block scale (a power of two for E8M0; an E4M3 value for
NVFP4) rounds once to bf16. That is the value the table decode computed (float32
``x * scale``, exact, then one rounding to bf16): ``x`` has at most 2 (E2M1) or 4 (E4M3)
significant bits and the scale 1 or 4, so the float32 product is exact and both paths round
the same real number once (docs/contract.md s4; the exhaustive decode tests in
``tests/single/`` compare every code under every scale byte with the oracle).

E4M3 NaN (``e | m`` all ones) has no such placement; ``e4m3_word_scaled`` tests a word
for NaN bytes (``nan_or_flagged``) and writes ``BF16_NAN_BITS`` in their halves. That test
and the two-product flag share one rarely taken branch.

PTX ``mul.rn.bf16x2`` (sm_90) keeps subnormal inputs and outputs (bf16 has no ``.ftz``);
the CuTe DSL 4.3.5 has no bf16x2 arithmetic or byte permute, hence the inline PTX
(``megamoe.ptx``).
"""

from __future__ import annotations

import struct

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cutlass_dsl import dsl_user_op

from megamoe.ptx import asm_i32
from megamoe.staging.dsl_bits import e4m3_to_float, e8m0_to_float, f2i

E2M1_MAGNITUDES = tuple((1 + m / 2) * 2.0 ** (e - 1) if e else m / 2
                        for e in range(4) for m in range(2))
"""The E2M1 magnitudes by code bits ``e | m`` (bias 1, one mantissa bit; docs/contract.md s4):
0, 0.5, 1, 1.5, 2, 3, 4, 6, all exact in bf16."""


def _bf16_bytes(value: float) -> tuple[int, int]:
    """(low, high) byte of ``value``'s bf16 bits (exact values only: the float32 bits'
    high half)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    assert bits & 0xFFFF == 0, f"{value} is not exact in bf16"
    return (bits >> 16) & 0xFF, bits >> 24


def _lut(byte_of: int) -> tuple[int, int]:
    """The 8-entry byte table of the E2M1 magnitudes' bf16 byte ``byte_of`` (0: low, 1:
    high) as ``prmt``'s two source words: entries 0-3, entries 4-7 (little-endian)."""
    table = [_bf16_bytes(v)[byte_of] for v in E2M1_MAGNITUDES]
    return tuple(int.from_bytes(bytes(table[i:i + 4]), "little") for i in (0, 4))


E2M1_LO_LUT = _lut(0)
"""``prmt`` sources: low bf16 byte of each E2M1 magnitude (0x00, 0x00, 0x80, 0xC0, ...)."""
E2M1_HI_LUT = _lut(1)
"""``prmt`` sources: high bf16 byte of each E2M1 magnitude (0x00, 0x3F, 0x3F, 0x3F, 0x40,
...)."""
SIGN_LUT = 0x00008000
"""``prmt`` source: byte 0 is 0x00 (sign bit clear), byte 1 is 0x80 (a bf16's sign bit in
its high byte)."""
INTERLEAVE_LO, INTERLEAVE_HI = 0x5140, 0x7362
"""``prmt`` selectors taking bytes (low 0, high 0, low 1, high 1) and (low 2, high 2, low 3,
high 3) of (low-byte word, high-byte word): two bf16x2 words in K order."""
E4M3_REBIAS_EXP = 127 - 7
"""E4M3 (bias 7) placed at bf16 bias 127 is worth ``2**-120`` of its value."""
E4M3_REBIAS_BF16X2 = ((127 + E4M3_REBIAS_EXP) << 7) * 0x00010001
"""``2**120`` in both halves (0x7B807B80)."""
E4M3_FOLD_MAX_BYTE = 127 - E4M3_REBIAS_EXP + 127
"""The largest E8M0 byte whose scale times ``2**120`` is a bf16 (``2**127``): 134."""
E4M3_PLACE_SEL = (0x1404, 0x3424)
"""``prmt`` selectors (source ``{0, x}``) putting bytes ``2j`` and ``2j + 1`` of ``x`` in
bytes 1 and 3 (the halves' high bytes), zeros in bytes 0 and 2: pair ``j`` = 0, 1."""
SIGN_BITS_X2 = 0x80008000 - (1 << 32)
"""Both halves' sign bits, as a signed 32-bit constant."""
BF16_NAN_BITS = 0x7FC0
"""The bf16 NaN the decode writes for an E4M3 NaN weight byte."""


@dsl_user_op
def bf16x2_mul(a: Int32, b: Int32, *, loc=None, ip=None) -> Int32:
    """Lane-wise ``a * b`` of two bf16x2 words, rounded to nearest even (``mul.rn.bf16x2``)."""
    return asm_i32("mul.rn.bf16x2 $0, $1, $2;", "=r,r,r", [Int32(a), Int32(b)],
                   side_effects=False, loc=loc, ip=ip)


@dsl_user_op
def prmt(a: Int32, b: Int32, sel: Int32, *, loc=None, ip=None) -> Int32:
    """``prmt.b32``: byte ``i`` of the result is byte ``sel[4i+2:4i]`` of the eight bytes
    ``{b, a}`` (0-3 from ``a``); a selector nibble with its top bit set replicates that
    byte's sign bit instead (callers keep it clear); ``sel`` bits 16-31 are ignored."""
    return asm_i32("prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [Int32(a), Int32(b), Int32(sel)],
                   side_effects=False, loc=loc, ip=ip)


@cute.jit
def bf16_pair(bits16: Int32) -> Int32:
    """A bf16 bit pattern (low 16 bits) in both halves of a word."""
    lo = bits16 & 0xFFFF
    return lo | (lo << 16)


def e2m1_word_bf16x2(x: Int32) -> list[Int32]:
    """The eight E2M1 codes of the packed word ``x`` (code ``i`` in bits ``4i .. 4i+3``) as
    four bf16x2 words of their exact values, codes (0, 1), (2, 3), (4, 5), (6, 7) (module
    docstring). Called inside a kernel's trace."""
    mag = x & 0x77777777  # each code's e | m: selector nibbles with the top bit clear
    sgn = (x >> 3) & 0x11111111  # each code's sign bit as a 0 / 1 nibble
    out = []
    for half in range(2):  # codes 4 * half .. 4 * half + 3: prmt reads 16 selector bits
        m = mag if half == 0 else mag >> 16
        s = sgn if half == 0 else sgn >> 16
        lo = prmt(Int32(E2M1_LO_LUT[0]), Int32(E2M1_LO_LUT[1]), m)
        hi = prmt(Int32(E2M1_HI_LUT[0]), Int32(E2M1_HI_LUT[1]), m) | prmt(
            Int32(SIGN_LUT), Int32(0), s)
        out.append(prmt(lo, hi, Int32(INTERLEAVE_LO)))
        out.append(prmt(lo, hi, Int32(INTERLEAVE_HI)))
    return out


def e4m3_pair_bits(x: Int32, j: int) -> Int32:
    """Bytes ``2j`` and ``2j + 1`` of the word ``x`` (E4M3, not NaN) as bf16x2 bits, each
    worth ``e4m3(byte) * 2**-120`` (module docstring): ``s`` at bit 15, ``e | m`` at bits
    4-10 of each half. Plain integer arithmetic and ``prmt``, traced into a kernel (the
    host test runs it on Python ints)."""
    p = prmt(x, Int32(0), Int32(E4M3_PLACE_SEL[j]))
    return ((p >> 4) & 0x07F007F0) | (p & SIGN_BITS_X2)


@cute.jit
def nan_or_flagged(x: Int32, scale: Int32) -> cutlass.Boolean:
    """Whether any byte of ``x`` is an E4M3 NaN (``0x7F`` or ``0xFF``: adding 1 to each
    byte's low 7 bits carries into bit 7 exactly for 0x7F) or ``scale`` is a flagged
    ``e4m3_block_scale`` word (sign bits set): ``e4m3_word_scaled``'s rare branch."""
    nan_bits = ((x & 0x7F7F7F7F) + 0x01010101) & (0x80808080 - (1 << 32))
    return (nan_bits | (scale & -(1 << 31))) != Int32(0)


@cute.jit
def scale_pair(byte: Int32, e4m3: cutlass.Constexpr[bool]) -> Int32:
    """A block scale byte (low 8 bits of ``byte``: E8M0 for the MX formats, E4M3 for NVFP4)
    as its bf16 value in both halves of a word: the scale's float32 bits >> 16 are its bf16
    bits exactly (an E8M0 or E4M3 value has at most 4 significant bits)."""
    value = e4m3_to_float(byte & 0xFF) if e4m3 else e8m0_to_float(byte & 0xFF)
    return bf16_pair(f2i(value) >> 16)


def e2m1_word_scaled(x: Int32, scale: Int32) -> list[Int32]:
    """The eight E2M1 codes of ``x`` times the block scale ``scale`` (a ``scale_pair``
    word): four bf16x2 words, codes (0, 1) .. (6, 7), each rounded once (module docstring).
    Called inside a kernel's trace."""
    return [bf16x2_mul(v, scale) for v in e2m1_word_bf16x2(x)]


def e4m3_folded_scale_bits(b: Int32) -> Int32:
    """The bf16 bits of ``2**(b - 127) * 2**120`` for an E8M0 byte ``b <=
    E4M3_FOLD_MAX_BYTE``: exponent field ``b + 120``, mantissa 0 (a normal bf16)."""
    return (b + E4M3_REBIAS_EXP) << 7


@cute.jit
def e4m3_block_scale(byte: Int32) -> Int32:
    """An E8M0 block scale byte (low 8 bits of ``byte``) for E4M3 weights as the word
    ``e4m3_word_scaled`` takes: ``2**(B - 7)`` (the scale times the rebias ``2**120``) in
    both halves for ``B <= E4M3_FOLD_MAX_BYTE``; else the scale itself (``scale_pair``:
    ``2**(B - 127)``, NaN for 0xFF) with both sign bits set, the two-product flag (module
    docstring)."""
    b = byte & 0xFF
    folded = bf16_pair(e4m3_folded_scale_bits(b))
    flagged = scale_pair(b, False) | SIGN_BITS_X2
    return Int32(cutlass.select_(b <= Int32(E4M3_FOLD_MAX_BYTE), folded, flagged))


@cute.jit
def e4m3_word_scaled(x: Int32, scale: Int32) -> list:
    """The four E4M3 bytes of ``x`` times the block scale (``scale``: an
    ``e4m3_block_scale`` word): two bf16x2 words, bytes (0, 1) and (2, 3), each the real
    product rounded once; a NaN byte (``0x7F`` / ``0xFF``) is ``BF16_NAN_BITS`` in its
    half (module docstring). One product a pair with the folded scale; a flagged scale
    (negative word) takes the rebias product first."""
    out = cute.make_rmem_tensor(cute.make_layout(2), Int32)
    for j in cutlass.range_constexpr(2):
        out[j] = bf16x2_mul(e4m3_pair_bits(x, j), scale)
    if nan_or_flagged(x, scale):
        if scale < Int32(0):
            plain = scale & 0x7FFF7FFF
            rebias = Int32(E4M3_REBIAS_BF16X2)
            for j in cutlass.range_constexpr(2):
                out[j] = bf16x2_mul(bf16x2_mul(e4m3_pair_bits(x, j), rebias), plain)
        for j in cutlass.range_constexpr(2):
            v = out[j]
            lo_nan = ((x >> (16 * j)) & 0x7F) == Int32(0x7F)
            hi_nan = ((x >> (16 * j + 8)) & 0x7F) == Int32(0x7F)
            v = Int32(cutlass.select_(lo_nan, (v & -65536) | BF16_NAN_BITS, v))
            v = Int32(cutlass.select_(hi_nan, (v & 0xFFFF) | (BF16_NAN_BITS << 16), v))
            out[j] = v
    return [out[0], out[1]]
