"""The oracle's formats reproduce the golden byte vectors bit for bit (docs/contract.md s4).

The vectors come from fixtures/make_golden.py (exact rational arithmetic; it
never imports the oracle). Each test names the rule whose bytes it pins.
"""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

from oracle import formats as F

from .golden import (
    GOLDEN,
    check_casts,
    check_e8m0,
    check_mx,
    check_nvfp4,
    check_safe_fp8,
    f32_from_hex,
    load,
)


def test_golden_files_are_what_the_generator_writes() -> None:
    proc = subprocess.run(
        [sys.executable, str(GOLDEN.parent / "make_golden.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.contract("s4.element-casts")
@pytest.mark.parametrize(
    ("fmt", "cast"), [("e4m3", F.cast_e4m3), ("e5m2", F.cast_e5m2), ("e2m1", F.e2m1_encode)]
)
def test_element_casts_round_ties_to_even_and_saturate(fmt, cast) -> None:
    assert check_casts(fmt, cast) == []


def test_golden_casts_cover_every_tie_and_boundary() -> None:
    kinds = {c[0] for fmt in ("e4m3", "e5m2", "e2m1") for c in load("casts.json")[fmt]}
    assert {"tie", "below_tie", "above_tie", "saturate", "inf", "nan", "exact"} <= kinds
    # E4M3 has 127 non-negative finite values (0x00..0x7E) -> 126 ties, each with both signs
    assert sum(c[0] == "tie" for c in load("casts.json")["e4m3"]) == 2 * 126


@pytest.mark.contract("s4.e8m0")
def test_e8m0_decode_all_256_bytes() -> None:
    assert len(load("e8m0.json")["cases"]) == 256
    assert check_e8m0(F.e8m0_decode) == []


@pytest.mark.contract("s4.e8m0")
def test_e8m0_encode_inverts_decode_on_all_finite_bytes() -> None:
    b = torch.arange(255, dtype=torch.uint8)
    exps = torch.arange(-127, 128, dtype=torch.int32)
    assert torch.equal(F.e8m0_encode(exps), b)


@pytest.mark.contract("s4.mx-special-blocks", "s4.mxfp8-floor", "s4.mxfp8-rceil")
@pytest.mark.parametrize("elem", ["e4m3", "e5m2"])
def test_mxfp8_golden_blocks(elem) -> None:
    assert check_mx("mxfp8.json", elem, lambda x, mode: F.quantize_mxfp8(x, elem, mode)) == []


@pytest.mark.contract("s4.mxfp4")
def test_mxfp4_golden_blocks() -> None:
    assert check_mx("mxfp4.json", "cases", lambda x, mode: F.quantize_mxfp4(x, mode)) == []


@pytest.mark.contract("s4.nvfp4")
def test_nvfp4_golden_blocks() -> None:
    assert check_nvfp4(lambda x, g: F.quantize_nvfp4(x, g)) == []


@pytest.mark.contract("s4.safe-fp8")
def test_safe_fp8_golden_rows_both_paths_and_zero() -> None:
    paths = {c["path"] for c in load("safe_fp8.json")["cases"]}
    assert paths == {"zero", "tiny", "normal"}
    assert check_safe_fp8(F.safe_fp8_quantize) == []


@pytest.mark.contract("s4.safe-fp8")
def test_safe_fp8_tiny_rows_keep_information() -> None:
    """1e-35 rows go through the tiny path and keep a non-zero payload."""
    x = torch.full((1, 8), 1e-35) * torch.linspace(-1, 1, 8)
    payload, d = F.safe_fp8_quantize(x)
    assert payload.view(torch.uint8).ne(0).any() and d.item() > 0
    back = F.safe_fp8_dequantize(payload, d)
    assert torch.allclose(back, x, rtol=0.07, atol=0)


@pytest.mark.contract("s4.mx-special-blocks")
def test_mx_tiny_block_keeps_information() -> None:
    """docs/contract.md s4: an amax of 1e-36 still yields non-zero payload."""
    x = torch.full((1, 32), 1e-36)
    for elem in ("e4m3", "e5m2"):
        for mode in ("rceil", "floor"):
            payload, _ = F.quantize_mxfp8(x, elem, mode)
            assert payload.view(torch.uint8).ne(0).all(), (elem, mode)


def _mx_dequant_expected(payload_bytes: list[int], scale: list[int], dtype) -> np.ndarray:
    """Independent dequant: ml_dtypes decodes the element, float64 applies 2**(b-127)."""
    vals = np.array(payload_bytes, dtype=np.uint8).view(dtype).astype(np.float64).reshape(len(scale), -1)
    factors = np.array([np.nan if b == 255 else 2.0 ** (b - 127) for b in scale])
    with np.errstate(over="ignore"):  # 57344 * 2**119 is Inf in float32, as in the oracle
        return (vals * factors[:, None]).astype(np.float32).reshape(-1)


@pytest.mark.parametrize(
    ("elem", "np_dtype", "t_dtype"),
    [
        ("e4m3", ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn),
        ("e5m2", ml_dtypes.float8_e5m2, torch.float8_e5m2),
    ],
)
def test_mxfp8_dequantize_golden(elem, np_dtype, t_dtype) -> None:
    for c in load("mxfp8.json")[elem]:
        payload = torch.tensor(c["payload"], dtype=torch.uint8).view(t_dtype).reshape(1, -1)
        scale = torch.tensor([c["scale"]], dtype=torch.uint8)
        got = F.dequantize_mxfp8(payload, F.pad_scale_columns(scale)).numpy().reshape(-1)
        exp = _mx_dequant_expected(c["payload"], c["scale"], np_dtype)
        np.testing.assert_array_equal(got, exp, err_msg=c["name"])


@pytest.mark.contract("s4.nvfp4")
def test_nvfp4_dequantize_golden() -> None:
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    for c in load("nvfp4.json")["cases"]:
        packed = torch.tensor([c["packed"]], dtype=torch.uint8)
        scales = torch.tensor([c["scales"]], dtype=torch.uint8).view(torch.float8_e4m3fn)
        g = f32_from_hex([c["global_scale"]]).reshape(1, 1)
        got = F.dequantize_nvfp4(packed, scales, g).numpy().reshape(-1)
        codes = np.array([[b & 15, b >> 4] for b in c["packed"]]).reshape(-1)
        s = np.array(c["scales"], dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        vals = e2m1[codes].astype(np.float32).reshape(len(s), -1)
        exp = ((vals * s[:, None]) * g.numpy().reshape(())).reshape(-1)  # float32 ops, as written
        np.testing.assert_array_equal(got, exp, err_msg=c["name"])
