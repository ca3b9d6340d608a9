"""The ``fp8_mxfp4`` building blocks on the host (docs/contract.md s4 MXFP4 and safe FP8, s5):
the MXFP4 weight quantizer and dequantizer against the oracle byte for byte, the grouped
GEMM's PyTorch path with MXFP4 weights and the row pre-scale against the oracle's steps,
the E4M3 -> bf16 widening gather and the A2 safe-FP8 quantizer (PyTorch paths; the kernels
are compared with them on the GPU, tests/single). Planted bugs show each check can fail."""

from __future__ import annotations

import ml_dtypes
import pytest
import torch

from megamoe.errors import ConfigError
from megamoe.experts import api
from megamoe.experts.api import PRE_LANES, grouped_gemm, grouped_gemm_torch
from megamoe.experts.mxfp4 import Mxfp4Matrix, dequantize_mxfp4, interleave_rows, quantize_mxfp4
from megamoe.layer import a2_quant, permute, permute_kernel
from megamoe.layer.a2_quant import quantize_a2_safe_fp8, segment_rows
from megamoe.layer.permute import widen_rows
from oracle import formats as of
from oracle.ffn import rows_matmul, swiglu
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import POISON, assert_rows_match, live_mask, poison_
from tests.mxfp4_case import make_mxfp4_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _edge_weights() -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(2, 8, 128, generator=g) * torch.logspace(-42, 38, 8).view(1, 8, 1)
    w[0, 0, :32] = 0.0  # all-zero block
    w[0, 1, 40] = float("nan")  # NaN block
    w[1, 2, 70] = float("-inf")  # Inf block
    w[1, 3, :32] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4)  # E2M1 ties
    w[1, 4, :32] = 6.0 * 2.0**125 * (1 + 2.0**-20)  # just above a power of two: e rounds up
    return w


@pytest.mark.contract("s4.mxfp4", "s8.bitwise-stages")
def test_mxfp4_quantizer_matches_the_oracle_byte_for_byte() -> None:
    w = _edge_weights()
    got = quantize_mxfp4(w)
    codes, sbytes = of.quantize_mxfp4(w)
    assert same_bits(got.codes, codes) and same_bits(got.scales, sbytes)


@pytest.mark.contract("s4.mxfp4")
def test_mxfp4_block_whose_d_is_2_pow_minus_127_gets_byte_0() -> None:
    """docs/contract.md s4 MXFP4 (the MXFP8 rceil rule with fmax 6): a block with ``amax = 6 *
    2**-127`` (1.5 * 2**-125) has ``d = amax / 6 = 2**-127`` exactly, a subnormal float32
    power of two, so ``e = -127``: byte 0x00 and codes ``e2m1(x * 2**127)`` (ml_dtypes, ties
    to even; code 0 unsigned). An exact ceil(log2) that adds one at subnormal powers of two
    gives byte 0x01 and codes of half the values."""
    pattern = [1.0, -0.5, 0.25, 0.375, -0.75, 0.875, 0.0, -0.125] * 4
    block = torch.tensor([6.0 * 2.0**-127 * k for k in pattern], dtype=torch.float64)
    w = torch.stack([block, -block]).view(1, 2, 32)
    codes = (w.numpy() * 2.0**127).astype(ml_dtypes.float4_e2m1fn).view("uint8") & 0x0F
    codes[(codes & 0x07) == 0] = 0
    want = torch.from_numpy(codes[..., 0::2] | codes[..., 1::2] << 4)
    assert int(want[0, 0, 0]) == 0xD7  # 6 (code 7) low, -3 (code 8 | 5) high: by hand
    got = quantize_mxfp4(w.float())
    assert got.scales.tolist() == [[[0x00], [0x00]]]
    assert torch.equal(got.codes, want)


def test_mxfp4_dequant_matches_the_oracle_for_every_code_and_byte() -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(256, 1)[:, :128]
    codes = torch.cat([codes, codes.flip(1)], 1).contiguous()  # every byte, both nibbles
    sbytes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(256, 1).expand(256, 16)
    got = dequantize_mxfp4(codes, sbytes.contiguous())
    assert same_bits(got, of.dequantize_mxfp4(codes, sbytes.contiguous()))


def test_interleave_rows_moves_codes_and_scales_with_their_row() -> None:
    x = torch.arange(2 * 6 * 4, dtype=torch.int32).to(torch.uint8).reshape(2, 6, 4)
    out = interleave_rows(x)
    for e in range(2):
        for j in range(3):
            assert torch.equal(out[e, 2 * j], x[e, j]) and torch.equal(out[e, 2 * j + 1], x[e, 3 + j])


# ---------------------------------------------------------------- GEMM PyTorch path


def _oracle_rows(case, mode: str, clamp: float | None, e: int, lo: int, hi: int) -> torch.Tensor:
    """The oracle's float32 steps for rows [lo, hi) of expert e, canonical weights."""
    w = of.dequantize_mxfp4(case["w"].codes[e], case["w"].scales[e])
    h = rows_matmul(case["a"][lo:hi].float(), w)
    if case["pre"] is not None:
        h = h * case["pre"][lo:hi, :1]
    if mode == "swiglu":
        i = w.shape[0] // 2
        h = swiglu(h[:, :i], h[:, i:], clamp)
    if case["scale"] is not None:
        h = h * case["scale"][lo:hi].unsqueeze(1)
    return h


@pytest.mark.contract("s5.clamp")
@pytest.mark.parametrize(("mode", "clamp", "out_dtype", "pre"), [
    ("swiglu", None, torch.float32, True), ("swiglu", 0.5, torch.bfloat16, False),
    ("plain", None, torch.bfloat16, True), ("plain", None, torch.float32, False),
])
def test_torch_path_with_mxfp4_weights_meets_the_oracle(mode, clamp, out_dtype, pre) -> None:
    case = make_mxfp4_case(mode, [3, 0, 130], 128, 128, seed=5, out_dtype=out_dtype, pre=pre)
    poison_(case["out"])
    path = grouped_gemm(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                        mode=mode, row_scale=case["scale"], clamp=clamp,
                        pre_scale=case["pre"])
    assert path == api.PATH_TORCH
    seg, cnt = case["seg"].tolist(), case["counts"].tolist()
    for e, c in enumerate(cnt):
        if c:
            assert_rows_match(case["out"][seg[e] : seg[e] + c],
                              _oracle_rows(case, mode, clamp, e, seg[e], seg[e] + c))
    dead = case["out"][~live_mask(seg, cnt, case["out"].shape[0])]
    assert bool((dead.contiguous().view(torch.int16) == POISON).all())


@pytest.mark.contract("s5.clamp")
def test_the_pre_scale_comes_before_the_clamp_and_a_planted_order_is_caught() -> None:
    case = make_mxfp4_case("swiglu", [40], 128, 128, seed=6, out_dtype=torch.float32)
    case["pre"].mul_(8.0)  # large d: the clamp bites only if d comes first
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                       mode="swiglu", row_scale=case["scale"], clamp=0.5, pre_scale=case["pre"])
    want = _oracle_rows(case, "swiglu", 0.5, 0, 0, 40)
    assert_rows_match(case["out"][:40], want)
    late = torch.empty_like(case["out"])  # planted: d applied after the epilogue
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], late,
                       mode="swiglu", row_scale=case["scale"], clamp=0.5)
    late[:40] *= case["pre"][:40, :1]
    with pytest.raises(AssertionError, match="relative L2"):
        assert_rows_match(late[:40], want)


@pytest.mark.contract("s2.metadata-checks")
@pytest.mark.parametrize(("what", "edit"), [
    ("b.codes.dtype", lambda c: c.update(b=Mxfp4Matrix(c["b"].codes.view(torch.int8),
                                                       c["b"].scales))),
    ("b.codes.shape", lambda c: c.update(b=Mxfp4Matrix(c["b"].codes[:, :, :-16].contiguous(),
                                                       c["b"].scales))),
    ("b.scales.shape", lambda c: c.update(b=Mxfp4Matrix(c["b"].codes,
                                                        c["b"].scales[:, :, :-1].contiguous()))),
    ("pre_scale", lambda c: c.update(pre=c["pre"][:, :1].contiguous())),
    ("out", lambda c: c.update(out=c["out"].half())),
])
def test_bad_mxfp4_metadata_is_refused_by_name(what, edit) -> None:
    case = make_mxfp4_case("plain", [4], 128, 64, seed=7)
    edit(case)
    with pytest.raises(ConfigError, match=what.replace(".", r"\.").split("shape")[0]):
        grouped_gemm(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                     mode="plain", pre_scale=case["pre"])


# ---------------------------------------------------------------- widening gather


def test_widen_constants_agree_with_the_kernel_module() -> None:
    assert permute.WIDEN_CHUNK == permute_kernel.WIDEN_CHUNK
    assert a2_quant.LANES == PRE_LANES


def test_widen_rows_gives_every_e4m3_value_exactly_and_writes_only_indexed_rows() -> None:
    src = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(3, 1)
    src[1] = src[1].flip(0)
    dst = torch.full((6, 256), 9.0, dtype=torch.bfloat16)
    si = torch.tensor([1, 0, 2, 2])
    di = torch.tensor([4, 0, 2, 5])
    assert widen_rows(src, dst, si, di, torch.tensor([3])) == permute.PATH_TORCH
    # the reference decode: ml_dtypes' E4M3 (an independent library), then bf16 (exact)
    want = torch.from_numpy(src.numpy().view(ml_dtypes.float8_e4m3fn).astype("float32"))
    want = want.to(torch.bfloat16)
    for s, d in ((1, 4), (0, 0), (2, 2)):
        fin = ~want[s].isnan()
        assert torch.equal(dst[d][fin], want[s][fin])
        assert bool((dst[d][~fin].view(torch.int16) == 0x7FC0).all())  # canonical NaN
    assert bool((dst[[1, 3, 5]] == 9.0).all())  # row 5: index 3 >= count


# ---------------------------------------------------------------- A2 quantizer


@pytest.mark.contract("s4.safe-fp8")
def test_a2_quantizer_matches_the_oracle_on_live_rows_only() -> None:
    g = torch.Generator().manual_seed(8)
    counts = torch.tensor([3, 0, 5], dtype=torch.int32)
    seg = api.padded_segment_starts(counts)
    m_cap = int(seg[-1])
    act = torch.randn(m_cap, 64, generator=g) * torch.logspace(-40, 30, m_cap).view(-1, 1)
    act[1] = 0.0  # zero row: d = 1e-30
    act[129] *= 1e-25  # tiny path
    a2 = torch.full((m_cap, 64), 5.0, dtype=torch.bfloat16)
    d = torch.full((m_cap, 4), 5.0)
    assert quantize_a2_safe_fp8(act, a2, d, *segment_rows(seg, counts, m_cap)) == a2_quant.PATH_TORCH
    live = live_mask(seg.tolist(), counts.tolist(), m_cap)
    payload, want_d = of.safe_fp8_quantize(act[live])
    assert same_bits(a2[live], payload.to(torch.bfloat16))
    assert same_bits(d[live], want_d.view(-1, 1).expand(-1, 4).contiguous())
    assert bool((a2[~live] == 5.0).all()) and bool((d[~live] == 5.0).all())
    broken = a2.clone()
    broken[0] = (act[0] / want_d[0]).to(torch.bfloat16)  # planted: no E4M3 rounding
    assert not same_bits(broken[live], payload.to(torch.bfloat16))
