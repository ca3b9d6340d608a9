"""Grouped expert GEMM with MXFP4 weights on a Hopper GPU (docs/contract.md s4 MXFP4, s5, s8).

- Exact decode: with ``a`` the identity, FC2's float32 output is the weights' dequantized
  values bit for bit, for every E2M1 code under every E8M0 scale byte (0..255), so the
  mainloop decode is exactly the oracle's float32 dequant (a NaN/Inf weight poisons its
  whole output column through ``0 * NaN``, as in any GEMM).
- Accuracy: every live row of every variant, mode, output dtype and with/without the
  row pre-scale against the PyTorch path (``grouped_gemm_torch``, itself checked against
  the oracle on the host) within the s8 bf16 bound; rows outside the segments untouched.
- Invariance (s8): a row's bits do not depend on the other rows or its place in the tile.
- The checker can fail: nibble-swapped codes (a planted decode bug) are caught.
"""

from __future__ import annotations

import pytest
import torch

from megamoe.errors import ConfigError
from megamoe.experts import api
from megamoe.experts.api import (
    SplitKWorkspace,
    grouped_gemm,
    grouped_gemm_torch,
    padded_segment_starts,
)
from megamoe.experts.mxfp4 import Mxfp4Matrix
from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT, MXFP4_CONFIGS
from oracle.formats import dequantize_mxfp4
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import (
    POISON,
    live_mask,
    part_height_counts,
    poison_,
    row_rel_errors,
)
from tests.mxfp4_case import make_mxfp4_case

BF16_TOL = 0.01  # docs/contract.md s8 (the GEMM alone: bf16 operands, float32 accumulation)
CFG_IDS = [c.name for c in MXFP4_CONFIGS]
COMPILE_GROUP_PARAMS = ("cfg",)
"""The variant chooses the kernels a test compiles (``tests.harness.compile_groups``)."""
SHAPES = {"swiglu": (640, 256), "plain": (576, 384)}  # (K, N): K spans > stages k tiles


def identity_gemm(w, k: int, n: int, device, config=None) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """``a = I`` (bf16, one expert of ``k`` rows) times the weights ``w`` through the kernel
    (``config``: the variant, else the default), float32 ``[k, n]``: ``w``'s decoded values,
    transposed; returned on the CPU."""
    counts = torch.tensor([k], dtype=torch.int32)
    eye = torch.eye(k, dtype=torch.bfloat16, device=device)
    out = torch.empty(k, n, dtype=torch.float32, device=device)
    assert grouped_gemm(eye, w, padded_segment_starts(counts).to(device), counts.to(device),
                        out, mode="plain", config=config) == api.PATH_KERNEL
    return out.cpu()


def split_workspace_for(case, mode, cfg) -> SplitKWorkspace | None:
    """A fresh split-K workspace for ``case`` when ``cfg`` splits K (rows: all of ``M_cap``)."""
    if cfg is None or cfg.splits == 1:
        return None
    m_cap, k = case["a"].shape
    n = case["out"].shape[1] * (2 if mode == "swiglu" else 1)
    return SplitKWorkspace.create(cfg, n, k, m_cap, m_cap, case["a"].device)


def _run(case, mode, clamp, cfg=None, b=None, ws=None):
    ws = ws if ws is not None else split_workspace_for(case, mode, cfg)
    path = grouped_gemm(case["a"], case["b"] if b is None else b, case["seg"], case["counts"],
                        case["out"], mode=mode, row_scale=case["scale"], clamp=clamp,
                        config=cfg, pre_scale=case["pre"], split_workspace=ws)
    assert path == api.PATH_KERNEL
    if ws is not None:
        assert int(ws.arrivals.count_nonzero()) == 0, "split-K counters not reset"


def _torch_rows(case, mode, clamp):
    want = torch.empty_like(case["out"])
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], want, mode=mode,
                       row_scale=case["scale"], clamp=clamp, pre_scale=case["pre"])
    return want


def _check(case, mode, clamp) -> float:
    seg, cnt = case["seg"].tolist(), case["counts"].tolist()
    live = live_mask(seg, cnt, case["out"].shape[0]).to(case["out"].device)
    got, want = case["out"][live], _torch_rows(case, mode, clamp)[live]
    assert bool(torch.isfinite(got.float()).all()), "non-finite live row"
    rel = row_rel_errors(got.float().cpu(), want.float().cpu())
    worst = float(rel.max()) if rel.numel() else 0.0
    assert worst <= BF16_TOL, f"row {int(rel.argmax())}: relative L2 {worst:.3g}"
    dead = case["out"][~live].contiguous().view(torch.int16)
    assert bool((dead == POISON).all()), "a row outside the live segments was written"
    return worst


@pytest.mark.parametrize("cfg", MXFP4_CONFIGS, ids=CFG_IDS)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize(("clamp", "pre"), [(None, True), (0.75, False), (0.0, True)])
def test_swiglu_rows_match_the_torch_path(cuda_device, cfg, out_dtype, clamp, pre) -> None:
    k, n = SHAPES["swiglu"]
    case = make_mxfp4_case("swiglu", [0, 1, 130, 77, 256], k, n, seed=31, pre=pre,
                           out_dtype=out_dtype, device=cuda_device)
    poison_(case["out"])
    _run(case, "swiglu", clamp, cfg)
    print(f"mxfp4 swiglu {cfg.name} {out_dtype} clamp={clamp} pre={pre}: "
          f"worst {_check(case, 'swiglu', clamp):.3g}")


@pytest.mark.parametrize("cfg", [c for c in MXFP4_CONFIGS if 384 % c.tile_n == 0],
                         ids=[c.name for c in MXFP4_CONFIGS if 384 % c.tile_n == 0])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("pre", [True, False])
def test_plain_rows_match_the_torch_path(cuda_device, cfg, out_dtype, pre) -> None:
    k, n = SHAPES["plain"]
    case = make_mxfp4_case("plain", [128, 0, 3, 200], k, n, seed=32, pre=pre,
                           out_dtype=out_dtype, device=cuda_device)
    poison_(case["out"])
    _run(case, "plain", None, cfg)
    _check(case, "plain", None)


ALL_MX = [(kind, cfg) for kind, cfgs in CONFIGS_BY_FORMAT.items() for cfg in cfgs
          if SHAPES["plain"][1] % cfg.tile_n == 0]


@pytest.mark.parametrize(("kind", "cfg"), ALL_MX, ids=[f"{k}-{c.name}" for k, c in ALL_MX])
def test_every_a_load_height_gives_the_live_rows(cuda_device, kind, cfg) -> None:
    """One A load per stage (``A_PART_ROWS``; the specialized bodies load partial tiles):
    experts sized so tiles of 128 and of 64 rows take each partial height and the whole
    tile; every live row of every MX format and variant against the PyTorch path."""
    k, n = SHAPES["plain"]
    case = make_mxfp4_case("plain", part_height_counts(), k, n, seed=37, pre=False,
                           device=cuda_device, weights=kind)
    poison_(case["out"])
    _run(case, "plain", None, cfg)
    _check(case, "plain", None)


LONG_K = 8832
"""K / 32 = 276 scale blocks: a 64-column tile's scale run is 1104 16-byte vectors (MXFP4,
MXFP8; NVFP4 2208), so every decode thread copies 9 (NVFP4 18) with 128 threads, 5 (9) with
256: more than one ``SCALE_COPY_BATCH``, and no thread count divides the run (the last
vector of some threads lies past it)."""
LONG_MX = [(kind, cfg) for kind, cfgs in CONFIGS_BY_FORMAT.items() for cfg in cfgs
           if cfg.splits == 1]


@pytest.mark.parametrize(("kind", "cfg"), LONG_MX, ids=[f"{k}-{c.name}" for k, c in LONG_MX])
@pytest.mark.mega_sm107("sparse-decode")
def test_a_long_scale_run_is_copied_whole(cuda_device, kind, cfg) -> None:
    """``copy_scales`` loads a batch of vectors before it stores them, the last one of a
    ragged run clamped and not stored: at ``LONG_K`` a vector copied to the wrong place or
    not at all scales a whole k block of some rows wrongly; every live row of every MX
    format and variant against the PyTorch path."""
    case = make_mxfp4_case("plain", [3, 70], LONG_K, 128, seed=41, pre=False,
                           device=cuda_device, weights=kind)
    poison_(case["out"])
    _run(case, "plain", None, cfg)
    _check(case, "plain", None)


def test_misaligned_scale_bytes_are_refused_before_launch(cuda_device) -> None:
    """The scale bytes are read with 16-byte vector loads: a scale tensor whose start is not
    16-byte aligned is a ``ConfigError`` naming it, and ``out`` is untouched."""
    case = make_mxfp4_case("plain", [3, 5], 128, 64, seed=34, device=cuda_device)
    poison_(case["out"])
    scales = case["b"].scales
    shifted = torch.empty(scales.numel() + 1, dtype=torch.uint8, device=cuda_device)[1:]
    shifted = shifted.view(scales.shape)
    shifted.copy_(scales)
    with pytest.raises(ConfigError, match=r"b\.scales\.data_ptr"):
        _run(case, "plain", None, b=Mxfp4Matrix(case["b"].codes, shifted))
    assert bool((case["out"].view(torch.int16) == POISON).all()), "out was written"


def test_gpt_oss_shapes_in_their_default_variant(cuda_device) -> None:
    """FC1 (K=2880, N=5760) and FC2 (K=2880, N=2880) of the gpt-oss-like layer."""
    for mode, k, n in (("swiglu", 2880, 5760), ("plain", 2880, 2880)):
        case = make_mxfp4_case(mode, [5, 140], k, n, seed=33, spread=3.0, device=cuda_device)
        poison_(case["out"])
        _run(case, mode, None)
        _check(case, mode, None)


@pytest.mark.contract("s4.e8m0", "s4.mxfp4")
def test_decode_is_exact_for_every_code_under_every_scale_byte(cuda_device) -> None:
    """a = I (bf16), FC2 float32: out[m, n] = W[n, m] exactly, W holding every E2M1 code
    under every E8M0 byte (row n: byte n for all its blocks)."""
    n, k = 256, 128
    # row n: bytes j + 64 * (n % 4): every code in the low nibble of every row (so under
    # every scale byte), every code in the high nibble over four rows
    j = torch.arange(k // 2).view(1, -1)
    codes = ((j + 64 * (torch.arange(n).view(-1, 1) % 4)) % 256).to(torch.uint8)
    codes = codes.unsqueeze(0).contiguous()
    sbytes = torch.arange(n, dtype=torch.int32).to(torch.uint8).view(1, n, 1)
    sbytes = sbytes.expand(1, n, k // 32).contiguous()
    w = Mxfp4Matrix(codes.to(cuda_device), sbytes.to(cuda_device))
    got = identity_gemm(w, k, n, cuda_device)
    deq = dequantize_mxfp4(codes[0], sbytes[0])  # the oracle's float32 values [N, K]
    want = deq.t().contiguous()
    poisoned = ~torch.isfinite(deq).all(dim=1)  # 0 * NaN (or Inf) in every row of a = I
    want[:, poisoned] = float("nan")
    assert torch.equal(got.isnan(), want.isnan())
    fin = ~want.isnan()
    bad = (got[fin] != want[fin]).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} decoded values differ, e.g. {got[fin][bad[:4]]} " \
                             f"vs {want[fin][bad[:4]]}"
    assert int(poisoned.sum()) < n // 8  # most rows are finite: the check covers them


def test_row_bits_do_not_depend_on_other_rows_or_tile_position(cuda_device) -> None:
    k, n = SHAPES["plain"]
    case = make_mxfp4_case("plain", [200], k, n, seed=34, device=cuda_device)
    _run(case, "plain", None)
    ref = case["out"][7].clone()
    row = case["a"][7].clone()
    case2 = make_mxfp4_case("plain", [131], k, n, seed=35, device=cuda_device)
    case2["b"], case2["a"][100] = case["b"], row
    case2["pre"][100], case2["scale"][100] = case["pre"][7], case["scale"][7]
    case2["a"][120:] = float("nan")  # other rows (live 120..130, padding beyond) hold NaN
    _run(case2, "plain", None)
    assert same_bits(case2["out"][100], ref)


def test_the_checker_catches_nibble_swapped_codes(cuda_device) -> None:
    k, n = SHAPES["plain"]
    case = make_mxfp4_case("plain", [64, 70], k, n, seed=36, device=cuda_device)
    swapped = Mxfp4Matrix(((case["b"].codes >> 4) | (case["b"].codes << 4)).contiguous(),
                          case["b"].scales)
    poison_(case["out"])
    _run(case, "plain", None, b=swapped)
    with pytest.raises(AssertionError, match="relative L2"):
        _check(case, "plain", None)
