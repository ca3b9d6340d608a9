"""The decode-batch GEMV variants of the block-scaled grouped GEMM on a Hopper GPU, every
weight format (``megamoe.experts.mx_gemv_kernel``; docs/contract.md s4, s5, s8).

- Accuracy: every live row against the PyTorch path within the s8 bf16 bound at the shapes
  that reach each code path: ``K`` with and without the 64-element last step (gpt-oss's 2880,
  DeepSeek's 7168 and 2048), one to 130 rows per expert (one pass of 16 rows and one token
  group, both groups, several passes, a second 128-row tile), both modes and output types.
- Invariance (s8), bit for bit: a row's output does not depend on the other rows, on how
  many there are, on NaN in the rows past the live ones, or on its place (lane, token group,
  pass) in the tile.
- The checker can fail: activations whose 64-element halves of every 128-element step are
  swapped (the permutation of K that the GEMV's A and B registers must share) are caught.
"""

from __future__ import annotations

import pytest
import torch

from megamoe.experts.mx_gemv_kernel import GEMV_ROWS, STEP_K
from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import poison_
from tests.mxfp4_case import make_mxfp4_case
from tests.single.test_mxfp4_gemm_kernel import _check, _run

GEMV = [(kind, c) for kind, cfgs in CONFIGS_BY_FORMAT.items() for c in cfgs if c.gemv_warps]
GEMV_IDS = [f"{kind}-{c.name}" for kind, c in GEMV]
SHAPES = [  # (mode, K, N, counts per expert)
    ("swiglu", 2880, 192, [1, 16, 0, 5]),  # gpt-oss's K: 22 steps and a half step
    ("plain", 2048, 128, [9, 130, 2]),  # DeepSeek's FC2 K; a second 128-row tile
    ("swiglu", 7168, 64, [3, 24]),  # DeepSeek's FC1 K
    ("plain", 576, 64, [8, 17, 33]),  # 4 steps and a half step; group and pass edges
]
CLAMP = {"swiglu": 0.75, "plain": None}
"""FC1's clamp in these cases; FC2 takes none."""


def _case(mode: str, k: int, n: int, counts: list[int], seed: int, out_dtype, device,
          kind: str = "mxfp4"):
    case = make_mxfp4_case(mode, counts, k, n, seed=seed, out_dtype=out_dtype, device=device,
                           weights=kind)
    poison_(case["out"])
    return case


@pytest.mark.parametrize(("kind", "cfg"), GEMV, ids=GEMV_IDS)
@pytest.mark.parametrize(("mode", "k", "n", "counts"), SHAPES,
                         ids=[f"{m}-k{k}-n{n}" for m, k, n, _ in SHAPES])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_every_live_row_within_the_gemm_tolerance(cuda_device, kind, cfg, mode, k, n, counts,
                                                  out_dtype) -> None:
    case = _case(mode, k, n, counts, 51, out_dtype, cuda_device, kind)
    _run(case, mode, CLAMP[mode], cfg)
    _check(case, mode, CLAMP[mode])


@pytest.mark.contract("s8.invariance")
@pytest.mark.parametrize(("kind", "cfg"), GEMV, ids=GEMV_IDS)
@pytest.mark.parametrize("mode", ["swiglu", "plain"])
def test_a_row_bits_do_not_depend_on_other_rows_or_its_place(cuda_device, kind, cfg,
                                                             mode) -> None:
    """Row 0 of a one-row expert against the same inputs at rows 3 (first token group),
    8 + 5 (second group) and 16 + 2 (second pass) of a 40-row expert whose other rows are
    random and whose padding rows hold NaN."""
    k, n = 2880, 64
    one = _case(mode, k, n, [1], 52, torch.float32, cuda_device, kind)
    _run(one, mode, CLAMP[mode], cfg)
    ref = one["out"][0].clone()
    for place in (3, 8 + 5, GEMV_ROWS + 2):
        many = _case(mode, k, n, [40], 53 + place, torch.float32, cuda_device, kind)
        many["b"] = one["b"]
        many["a"][place] = one["a"][0]
        many["pre"][place], many["scale"][place] = one["pre"][0], one["scale"][0]
        many["a"][40:] = float("nan")
        _run(many, mode, CLAMP[mode], cfg)
        assert same_bits(many["out"][place], ref), f"row at place {place} differs"


@pytest.mark.parametrize(("kind", "cfg"), GEMV, ids=GEMV_IDS)
def test_the_checker_catches_a_k_permutation_of_a_alone(cuda_device, kind, cfg) -> None:
    """The GEMV permutes K inside each 128-element step, the same way for A and B; if A's
    halves were swapped and B's not, every row would be wrong: the row check must say so."""
    case = _case("plain", 2048, 64, [5, 20], 54, torch.float32, cuda_device, kind)
    a = case["a"]
    m_cap, k = a.shape
    steps = a.view(m_cap, k // STEP_K, 2, STEP_K // 2)
    swapped = steps.flip(2).reshape(m_cap, k).contiguous()
    _run(dict(case, a=swapped), "plain", None, cfg)  # writes case["out"]
    with pytest.raises(AssertionError, match="relative L2"):
        _check(case, "plain", None)  # against the rows of the unswapped a
