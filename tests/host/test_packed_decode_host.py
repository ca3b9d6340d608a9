"""The E2M1 byte-permute decode on the host (CONTRACTS.md s4 MXFP4 / NVFP4 element values).

``packed_decode.e2m1_word_bf16x2`` is traced into the MX GEMM kernels; its body is plain
integer arithmetic plus ``prmt``. Here the same body runs on Python ints, with ``prmt``
emulated from the PTX ISA's definition, and every result is compared bit for bit with the
oracle's E2M1 values cast to bf16 by torch. The GPU counterpart (every code under every
scale byte through the real kernel) is ``tests/single/test_mxfp4_gemm_kernel.py``.
"""

from __future__ import annotations

import random

import pytest
import torch

from megamoe.experts import packed_decode
from oracle.formats import e2m1_decode

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
