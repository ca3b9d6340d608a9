"""The register decodes on the host (docs/contract.md s4 MXFP4 / NVFP4 / MXFP8 element values).

``packed_decode.e2m1_word_bf16x2`` and ``e4m3_pair_bits`` are traced into the MX GEMM
kernels; their bodies are plain integer arithmetic plus ``prmt``. Here the same bodies run
on Python ints, with ``prmt`` emulated from the PTX ISA's definition and ``mul.rn.bf16x2``
by torch (the float32 product of two bf16 is exact; one round-to-nearest-even to bf16), and
every result is compared bit for bit with the oracle's values cast to bf16 by torch: every
E2M1 code, and every E4M3 byte under every E8M0 scale byte the folded scale serves
(``E4M3_FOLD_MAX_BYTE``). The GPU counterparts (every code under every scale byte through
the real kernels) are ``tests/single/test_mxfp4_gemm_kernel.py`` and
``tests/single/test_mxfp8_kernels.py``.
"""

from __future__ import annotations

import random

import pytest
import torch

from megamoe.experts import packed_decode
from oracle.formats import dequantize_mxfp8, e2m1_decode

U32 = 0xFFFFFFFF


def ptx_prmt(a: int, b: int, sel: int) -> int:
    """``prmt.b32 d, a, b, c`` (PTX ISA, default mode): result byte ``i`` is source byte
    ``c[4i+2:4i]`` of ``{b, a}`` (bytes 0-3 from ``a``), or, when ``c[4i+3]`` is set, that
    byte's sign bit replicated over 8 bits; ``c`` bits 16-31 are not read."""
    src = (a & U32) | ((b & U32) << 32)
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = (src >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0x00
        out |= byte << (8 * i)
    return out


@pytest.fixture
def host_prmt(monkeypatch):
    """``packed_decode`` on Python ints: ``Int32`` is a 32-bit wrap, ``prmt`` the emulation
    above."""
    monkeypatch.setattr(packed_decode, "Int32", lambda v: int(v) & U32)
    monkeypatch.setattr(packed_decode, "prmt", ptx_prmt)


@pytest.fixture
def host_decode(monkeypatch):
    """``e2m1_word_bf16x2`` on Python ints: ``Int32`` is a 32-bit wrap, ``prmt`` the
    emulation above."""
    monkeypatch.setattr(packed_decode, "Int32", lambda v: int(v) & U32)
    monkeypatch.setattr(packed_decode, "prmt", ptx_prmt)
    return lambda word: [w & U32 for w in packed_decode.e2m1_word_bf16x2(word)]


def oracle_bf16x2(word: int) -> list[int]:
    """The oracle's values of the word's eight codes (code ``i`` in bits ``4i..4i+3``) as
    bf16 bits, paired (0, 1), (2, 3), ... low element in the low half."""
    codes = torch.tensor([(word >> (4 * i)) & 0xF for i in range(8)], dtype=torch.uint8)
    bits = e2m1_decode(codes).to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    b = bits.tolist()
    return [b[2 * j] | (b[2 * j + 1] << 16) for j in range(4)]


def words_to_check() -> list[int]:
    """Every code pair in every byte of the word (256 bytes x 4 positions, the other bytes
    a fixed mix), every code in all eight nibbles at once, and random words."""
    rng = random.Random(20)
    words = []
    for pos in range(4):
        for byte in range(256):
            filler = 0x9C3E71A5 & ~(0xFF << (8 * pos))
            words.append(filler | (byte << (8 * pos)))
    words += [int(f"{c:x}" * 8, 16) for c in range(16)]
    words += [rng.getrandbits(32) for _ in range(2000)]
    return words


def test_luts_hold_the_bf16_bytes_of_the_oracle_magnitudes() -> None:
    mags = e2m1_decode(torch.arange(8, dtype=torch.uint8)).to(torch.bfloat16)
    bits = (mags.view(torch.int16).to(torch.int32) & 0xFFFF).tolist()
    lo = packed_decode.E2M1_LO_LUT[0] | (packed_decode.E2M1_LO_LUT[1] << 32)
    hi = packed_decode.E2M1_HI_LUT[0] | (packed_decode.E2M1_HI_LUT[1] << 32)
    assert [(lo >> (8 * i)) & 0xFF for i in range(8)] == [b & 0xFF for b in bits]
    assert [(hi >> (8 * i)) & 0xFF for i in range(8)] == [b >> 8 for b in bits]


def test_every_code_in_every_position_decodes_to_the_oracle_bf16(host_decode) -> None:
    bad = [(hex(w), [hex(x) for x in host_decode(w)], [hex(x) for x in oracle_bf16x2(w)])
           for w in words_to_check() if host_decode(w) != oracle_bf16x2(w)]
    assert not bad, f"{len(bad)} words differ, e.g. {bad[:3]}"


@pytest.mark.parametrize(("name", "planted"), [
    ("SIGN_LUT", 0x00000000),  # signs dropped: -x decodes as x
    ("INTERLEAVE_LO", 0x4051),  # a pair's elements swapped
    ("E2M1_HI_LUT", (0x3F3F3F00, 0x40404041)),  # one wrong table byte (code 4)
])
def test_a_planted_permute_bug_is_caught(host_decode, monkeypatch, name, planted) -> None:
    monkeypatch.setattr(packed_decode, name, planted)
    assert any(host_decode(w) != oracle_bf16x2(w) for w in words_to_check())


def test_the_prmt_emulation_follows_the_ptx_definition() -> None:
    a, b = 0x03020100, 0x87868584
    assert ptx_prmt(a, b, 0x3210) == a  # identity
    assert ptx_prmt(a, b, 0x7654) == b
    assert ptx_prmt(a, b, 0x0000) == 0x00000000
    assert ptx_prmt(a, b, 0x0004) == 0x00000084
    assert ptx_prmt(a, b, 0x000C) == 0x000000FF  # sign of byte 4 (0x84) replicated
    assert ptx_prmt(a, b, 0x0008) == 0x00000000  # sign of byte 0 (0x00) replicated
    assert ptx_prmt(a, b, 0xFFFF0001) == 0x00000001  # selector bits 16-31 are not read


def bf16x2_mul(a: int, b: int) -> int:
    """``mul.rn.bf16x2`` on Python ints: each half the float32 product (exact for two bf16)
    rounded to nearest even by torch (subnormals kept, as PTX's bf16 product keeps them)."""
    halves = torch.tensor([a & 0xFFFF, a >> 16, b & 0xFFFF, b >> 16], dtype=torch.int32)
    vals = halves.to(torch.int16).view(torch.bfloat16).to(torch.float32)
    prod = (vals[:2] * vals[2:]).to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    return int(prod[0]) | (int(prod[1]) << 16)


E4M3_FINITE = [b for b in range(256) if b & 0x7F != 0x7F]
"""The E4M3 bytes with a value (0x7F / 0xFF are NaN and take the byte-wise path)."""


def e4m3_words() -> list[tuple[int, list[int]]]:
    """Words holding every finite E4M3 byte in each of the four positions (the other bytes a
    fixed mix of finite bytes), with their bytes in order."""
    words = []
    for pos in range(4):
        for byte in E4M3_FINITE:
            bs = [0x3C, 0x85, 0x01, 0xF6]
            bs[pos] = byte
            words.append((int.from_bytes(bytes(bs), "little"), bs))
    return words


def oracle_bf16_bits(byte: int, scale_byte: int) -> int:
    """The oracle's value of E4M3 ``byte`` under E8M0 ``scale_byte`` rounded once to bf16."""
    payload = torch.full((1, 32), byte, dtype=torch.uint8).view(torch.float8_e4m3fn)
    v = dequantize_mxfp8(payload, torch.tensor([[scale_byte]], dtype=torch.uint8))[0, 0]
    return int(v.to(torch.bfloat16).view(torch.int16)) & 0xFFFF


def folded_decode(word: int, scale_byte: int) -> list[int]:
    """The fast path of ``e4m3_word_scaled`` on ints: the placed pairs times the folded
    scale (``e4m3_folded_scale_bits`` in both halves)."""
    f = packed_decode.e4m3_folded_scale_bits(scale_byte) & 0xFFFF
    scale = f | (f << 16)
    return [bf16x2_mul(packed_decode.e4m3_pair_bits(word, j) & U32, scale) for j in range(2)]


def folded_mismatches(scale_bytes) -> list[tuple[int, int, int, int]]:
    """(scale byte, word, got half, want half) wherever the fast path differs from the
    oracle."""
    words = e4m3_words()
    bad = []
    for sb in scale_bytes:
        want = {b: oracle_bf16_bits(b, sb) for b in E4M3_FINITE}
        for word, bs in words:
            got = folded_decode(word, sb)
            halves = [got[0] & 0xFFFF, got[0] >> 16, got[1] & 0xFFFF, got[1] >> 16]
            bad += [(sb, word, h, want[b]) for h, b in zip(halves, bs, strict=True)
                if h != want[b]]
    return bad


def test_every_e4m3_byte_under_every_foldable_scale_decodes_to_the_oracle_bf16(
        host_prmt) -> None:
    """One product of the placed bits with ``2**(B - 7)`` is the oracle's ``x * 2**(B -
    127)`` rounded once, for every finite byte in every position and every scale byte ``B``
    up to ``E4M3_FOLD_MAX_BYTE`` (subnormal E4M3, bf16 subnormal and rounded results
    included: B = 0 puts every result below bf16's normal range)."""
    bad = folded_mismatches(range(packed_decode.E4M3_FOLD_MAX_BYTE + 1))
    assert not bad, f"{len(bad)} halves differ, e.g. {[tuple(map(hex, b)) for b in bad[:3]]}"


def fold_bound_holds() -> bool:
    """``2**(B - 7)`` is the finite bf16 ``e4m3_folded_scale_bits`` gives for B = 0 and B =
    ``E4M3_FOLD_MAX_BYTE``, and infinite for the byte past it."""
    top = packed_decode.E4M3_FOLD_MAX_BYTE
    for b, finite in ((0, True), (top, True), (top + 1, False)):
        bits = packed_decode.e4m3_folded_scale_bits(b) & 0xFFFF
        v = torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
        if bool(torch.isfinite(v)) != finite:
            return False
        if finite and float(v) != 2.0 ** (b - 127 + packed_decode.E4M3_REBIAS_EXP):
            return False
    return True


def test_the_fold_bound_is_the_last_scale_whose_folded_value_is_a_bf16() -> None:
    """The bytes above ``E4M3_FOLD_MAX_BYTE`` must take the two-product path
    (``e4m3_block_scale``): their folded value would be infinite."""
    assert fold_bound_holds()


@pytest.mark.parametrize("planted", [133, 135])
def test_a_planted_fold_bound_is_caught(monkeypatch, planted) -> None:
    monkeypatch.setattr(packed_decode, "E4M3_FOLD_MAX_BYTE", planted)
    assert not fold_bound_holds()


@pytest.mark.parametrize(("name", "planted"), [
    ("E4M3_PLACE_SEL", (0x3424, 0x1404)),  # the word's pairs swapped
    ("E4M3_PLACE_SEL", (0x0414, 0x2434)),  # a pair's halves swapped
    ("SIGN_BITS_X2", 0),  # signs dropped
    ("E4M3_REBIAS_EXP", 119),  # the fold off by a factor of two
])
def test_a_planted_e4m3_decode_bug_is_caught(host_prmt, monkeypatch, name, planted) -> None:
    monkeypatch.setattr(packed_decode, name, planted)
    assert folded_mismatches([127, 3])
