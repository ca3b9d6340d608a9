"""Bad input raises a ValueError naming the argument and the rule (API.md, COMMON rules)."""

from __future__ import annotations

import pytest
import torch

from oracle import formats as F

X64 = torch.ones(2, 64)
X48 = torch.ones(2, 48)
PAYLOAD = torch.zeros(2, 64, dtype=torch.float8_e4m3fn)
SCALE2 = torch.zeros(2, 2, dtype=torch.uint8)

CASES = [
    ("mxfp8 K not multiple of 32", lambda: F.quantize_mxfp8(X48), "x", "multiple of 32"),
    ("mxfp8 integer x", lambda: F.quantize_mxfp8(torch.ones(2, 64, dtype=torch.int32)), "x", "floating"),
    ("mxfp8 x not a tensor", lambda: F.quantize_mxfp8([1.0] * 32), "x", "torch.Tensor"),
    ("mxfp8 elem", lambda: F.quantize_mxfp8(X64, elem="e3m4"), "elem", "'e4m3' or 'e5m2'"),
    ("mxfp8 mode", lambda: F.quantize_mxfp8(X64, mode="ceil"), "mode", "'rceil' or 'floor'"),
    ("mxfp8 0-d", lambda: F.quantize_mxfp8(torch.tensor(1.0)), "x", "last dim"),
    ("dequant payload dtype", lambda: F.dequantize_mxfp8(torch.zeros(2, 64), SCALE2), "payload", "float8"),
    ("dequant scale dtype", lambda: F.dequantize_mxfp8(PAYLOAD, SCALE2.float()), "scale_bytes", "uint8"),
    ("dequant scale too few cols", lambda: F.dequantize_mxfp8(PAYLOAD, SCALE2[:, :1]), "scale_bytes", ">=2"),
    ("dequant scale wrong rows", lambda: F.dequantize_mxfp8(PAYLOAD, SCALE2[:1]), "scale_bytes", "shape"),
    ("mxfp4 K", lambda: F.quantize_mxfp4(X48), "x", "multiple of 32"),
    ("mxfp4 mode", lambda: F.quantize_mxfp4(X64, mode="even"), "mode", "'rceil' or 'floor'"),
    ("dequant mxfp4 K", lambda: F.dequantize_mxfp4(torch.zeros(2, 8, dtype=torch.uint8), SCALE2), "packed", "16"),
    ("nvfp4 K", lambda: F.quantize_nvfp4(torch.ones(2, 40)), "x", "multiple of 16"),
    ("nvfp4 inf g", lambda: F.quantize_nvfp4(X64, float("inf")), "global_scale", "finite and > 0"),
    ("nvfp4 nan g", lambda: F.quantize_nvfp4(X64, torch.full((2, 1), float("nan"))), "global_scale", "finite"),
    ("nvfp4 zero g", lambda: F.quantize_nvfp4(X64, 0.0), "global_scale", "> 0"),
    ("nvfp4 negative g", lambda: F.quantize_nvfp4(X64, -1.0), "global_scale", "> 0"),
    ("nvfp4 g dtype", lambda: F.quantize_nvfp4(X64, torch.ones(2, 1, dtype=torch.float64)), "global_scale", "float32"),
    ("nvfp4 g shape", lambda: F.quantize_nvfp4(X64, torch.ones(3, 1)), "global_scale", "broadcast"),
    ("nvfp4 g per column", lambda: F.quantize_nvfp4(X64, torch.ones(1, 64)), "global_scale", "broadcast"),
    ("nvfp4 g string", lambda: F.quantize_nvfp4(X64, "1.0"), "global_scale", "float"),
    (
        "dequant nvfp4 scales dtype",
        lambda: F.dequantize_nvfp4(torch.zeros(2, 32, dtype=torch.uint8), torch.zeros(2, 4, dtype=torch.uint8)),
        "scales",
        "float8_e4m3fn",
    ),
    ("nvfp4_global_scale type", lambda: F.nvfp4_global_scale("3"), "amax", "float"),
    ("safe fp8 3-D", lambda: F.safe_fp8_quantize(torch.ones(2, 2, 2)), "x", "2-D"),
    ("safe fp8 NaN row", lambda: F.safe_fp8_quantize(torch.tensor([[1.0, 2.0], [1.0, float("nan")]])), "x", "row 1"),
    ("safe fp8 Inf row", lambda: F.safe_fp8_quantize(torch.tensor([[float("-inf"), 2.0]])), "x", "row 0"),
    ("safe fp8 dequant d shape", lambda: F.safe_fp8_dequantize(PAYLOAD, torch.ones(3)), "d", "[T]"),
    ("safe fp8 wire 2-D", lambda: F.safe_fp8_scale_wire(torch.ones(2, 2)), "d", "1-D"),
    ("safe fp8 wire dtype", lambda: F.safe_fp8_scale_wire(torch.ones(2, dtype=torch.float64)), "d", "float32"),
    ("cast integer", lambda: F.cast_e4m3(torch.ones(3, dtype=torch.int64)), "x", "floating"),
    ("e2m1 decode >15", lambda: F.e2m1_decode(torch.tensor([16], dtype=torch.uint8)), "codes", "0..15"),
    ("e8m0 encode range", lambda: F.e8m0_encode(torch.tensor([128])), "exponent", "[-127, 127]"),
    ("e8m0 encode low", lambda: F.e8m0_encode(torch.tensor([-128])), "exponent", "[-127, 127]"),
    ("e8m0 encode float", lambda: F.e8m0_encode(torch.tensor([1.0])), "exponent", "integer"),
    ("e8m0 decode dtype", lambda: F.e8m0_decode(torch.tensor([1])), "scale_bytes", "uint8"),
    ("pack odd K", lambda: F.pack_fp4(torch.zeros(3, dtype=torch.uint8)), "codes", "multiple of 2"),
    ("pack code >15", lambda: F.pack_fp4(torch.tensor([1, 17], dtype=torch.uint8)), "codes", "0..15"),
    ("unpack dtype", lambda: F.unpack_fp4(torch.zeros(2, dtype=torch.int32)), "packed", "uint8"),
    ("pad multiple", lambda: F.pad_scale_columns(SCALE2, 0), "multiple", "int >= 1"),
    ("pad dtype", lambda: F.pad_scale_columns(SCALE2.float()), "scale", "uint8"),
]


@pytest.mark.parametrize(("what", "call", "argument", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_value_error_naming_argument_and_rule(what, call, argument, fragment) -> None:
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{argument}:"), message
    assert fragment in message, message
    assert "expected" in message and "got" in message, message


@pytest.mark.contract("s3.no-stray-writes")
def test_quantizers_never_modify_the_caller_tensor() -> None:
    x = torch.randn(4, 64) * 100
    x[0, 0] = float("nan")
    before = x.clone()
    F.quantize_mxfp8(x)
    F.quantize_mxfp8(x, "e5m2", "floor")
    F.quantize_mxfp4(x)
    F.quantize_nvfp4(x, torch.full((4, 1), 0.5))
    F.safe_fp8_quantize(x[1:])
    F.cast_e4m3(x)
    F.e2m1_encode(x)
    assert torch.equal(x.view(torch.int32), before.view(torch.int32))
