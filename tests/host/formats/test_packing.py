"""FP4 nibble packing, scale-column padding, E8M0 encode and the 4-lane wire scale (docs/contract.md s4)."""

from __future__ import annotations

import pytest
import torch

from oracle import formats as F


def test_pack_fp4_puts_the_even_element_in_the_low_nibble() -> None:
    codes = torch.tensor([[0x1, 0x2, 0xF, 0x8]], dtype=torch.uint8)
    assert F.pack_fp4(codes).tolist() == [[0x21, 0x8F]]


def test_unpack_inverts_pack_for_every_byte() -> None:
    packed = torch.arange(256, dtype=torch.uint8).reshape(4, 64)
    codes = F.unpack_fp4(packed)
    assert codes.shape == (4, 128) and int(codes.max()) <= 15
    assert torch.equal(F.pack_fp4(codes), packed)
    assert codes[0, :4].tolist() == [0, 0, 1, 0]  # byte 0x00 -> (0, 0); byte 0x01 -> (1, 0)


def test_pad_scale_columns_zero_fills_to_a_multiple_of_4() -> None:
    s = torch.arange(1, 11, dtype=torch.uint8).reshape(2, 5)
    out = F.pad_scale_columns(s)
    assert out.shape == (2, 8)
    assert torch.equal(out[:, :5], s) and int(out[:, 5:].abs().sum()) == 0
    assert F.pad_scale_columns(out).shape == (2, 8)  # already a multiple: unchanged
    assert F.pad_scale_columns(s, 3).shape == (2, 6)
    assert F.SCALE_COLUMN_MULTIPLE == 4


def test_dequantizers_ignore_padded_scale_columns() -> None:
    x = torch.randn(3, 96)
    payload, scale = F.quantize_mxfp8(x)
    padded = F.pad_scale_columns(scale)
    padded[:, 3:] = 0xFF  # garbage in the padding must not matter
    assert torch.equal(F.dequantize_mxfp8(payload, padded), F.dequantize_mxfp8(payload, scale))
    packed, scale4 = F.quantize_mxfp4(x)
    padded4 = F.pad_scale_columns(scale4)
    padded4[:, 3:] = 0xFF
    assert torch.equal(F.dequantize_mxfp4(packed, padded4), F.dequantize_mxfp4(packed, scale4))


@pytest.mark.contract("s4.e8m0")
def test_e8m0_encode_bytes() -> None:
    e = torch.tensor([-127, -1, 0, 1, 127])
    assert F.e8m0_encode(e).tolist() == [0, 126, 127, 128, 254]
    assert F.E8M0_NAN == 0xFF


@pytest.mark.contract("s4.safe-fp8")
def test_safe_fp8_scale_wire_is_four_equal_lanes() -> None:
    d = torch.tensor([1e-30, 0.5, 3.0])
    wire = F.safe_fp8_scale_wire(d)
    assert wire.shape == (3, 4) and wire.dtype == torch.float32 and wire.is_contiguous()
    assert torch.equal(wire, d[:, None].expand(3, 4))


def test_nvfp4_global_scale_is_one_float32_division() -> None:
    amax = torch.tensor([1234.5, 0.1, 3e38])
    expected = amax / torch.tensor(2688.0)
    assert torch.equal(F.nvfp4_global_scale(amax), expected)
    assert F.nvfp4_global_scale(2688.0).item() == 1.0
    assert F.nvfp4_global_scale(amax).dtype == torch.float32


def test_nvfp4_per_expert_global_scale_broadcasts() -> None:
    w = torch.randn(3, 4, 32)
    g = F.nvfp4_global_scale(w.abs().amax(dim=(1, 2), keepdim=True))  # [E, 1, 1]
    packed, scales = F.quantize_nvfp4(w, g)
    for e in range(3):
        p_e, s_e = F.quantize_nvfp4(w[e], g[e, 0, 0].item())
        assert torch.equal(packed[e], p_e) and torch.equal(scales[e].view(torch.uint8), s_e.view(torch.uint8))
    back = F.dequantize_nvfp4(packed, scales, g)
    assert back.shape == w.shape
    assert torch.equal(back[1], F.dequantize_nvfp4(packed[1], scales[1], g[1, 0, 0].item()))


def test_formats_accept_leading_dims_and_empty_tensors() -> None:
    x = torch.randn(2, 3, 64)
    p, s = F.quantize_mxfp8(x)
    assert p.shape == x.shape and s.shape == (2, 3, 2)
    assert torch.equal(p.view(torch.uint8)[1, 2], F.quantize_mxfp8(x[1, 2:3])[0].view(torch.uint8)[0])
    p0, s0 = F.quantize_mxfp8(torch.zeros(0, 64))
    assert p0.shape == (0, 64) and s0.shape == (0, 2)
    payload, d = F.safe_fp8_quantize(torch.zeros(0, 8))
    assert payload.shape == (0, 8) and d.shape == (0,)
