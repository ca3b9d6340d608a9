"""Split-K MX GEMM variants on a Hopper GPU (``megamoe.experts.split_k``; docs/contract.md s5, s8, s9).

- Decode-size batches (one row of one expert, one row in each of many experts, rows across
  a 64-row tile edge) in every split-K variant of every MX format, with DeepSeek's FC2
  depth (K = 2048: 32 k tiles in 2 to 8 slices) and an uneven one (K = 640: 10 k tiles):
  every live row against the PyTorch path within the s8 bf16 bound, rows outside the
  segments untouched, the arrival counters back at zero after every launch.
- Invariance (s8), bitwise: a row's bits do not depend on the other rows, its place, or
  which CTA of its tile arrives last (twenty launches of one batch agree bit for bit).
- CUDA graphs (s9): one captured launch replayed with new counts and rows matches an
  eager launch each time.
- The checks can fail: a stale counter (a missed reset) is caught, both by the counter
  check and by the row check.
"""

from __future__ import annotations

import pytest
import torch

from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT
from megamoe.experts.split_k import effective_splits
from megamoe.graphs import capture
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import poison_
from tests.mxfp4_case import make_mxfp4_case
from tests.single.test_mxfp4_gemm_kernel import _check, _run, split_workspace_for

SPLIT = [(kind, cfg) for kind, cfgs in CONFIGS_BY_FORMAT.items() for cfg in cfgs
         if cfg.splits > 1]
SPLIT_IDS = [f"{kind}-{cfg.name}" for kind, cfg in SPLIT]
DECODE_COUNTS = {
    "one-row": [0, 0, 1, 0],
    "one-row-each": [1] * 12,
    "tile-edge": [65, 0, 3, 64],
}
"""Expert row counts of decode-size batches (the sizes split-K is chosen for)."""


@pytest.mark.parametrize(("kind", "cfg"), SPLIT, ids=SPLIT_IDS)
@pytest.mark.parametrize("counts", list(DECODE_COUNTS), ids=list(DECODE_COUNTS))
@pytest.mark.parametrize(("mode", "k", "n"), [("plain", 2048, 192), ("swiglu", 640, 256)],
                         ids=["plain-k2048", "swiglu-k640"])
def test_decode_size_batches_match_the_torch_path(cuda_device, kind, cfg, counts, mode, k,
                                                  n) -> None:
    assert k // 64 >= cfg.splits  # every slice has k tiles: the variant really splits
    case = make_mxfp4_case(mode, DECODE_COUNTS[counts], k, n, seed=61, weights=kind,
                           out_dtype=torch.float32 if mode == "swiglu" else torch.bfloat16,
                           device=cuda_device)
    poison_(case["out"])
    _run(case, mode, 0.75 if mode == "swiglu" else None, cfg)
    worst = _check(case, mode, 0.75 if mode == "swiglu" else None)
    print(f"split-K {kind} {cfg.name} {counts} {mode} K={k}: worst {worst:.3g}")


SPLIT_MXFP4 = next(cfg for kind, cfg in SPLIT if kind == "mxfp4")


def test_row_bits_do_not_depend_on_other_rows_or_the_arrival_order(cuda_device) -> None:
    k, n = 2048, 192
    case = make_mxfp4_case("plain", [200], k, n, seed=62, device=cuda_device)
    ws = split_workspace_for(case, "plain", SPLIT_MXFP4)
    _run(case, "plain", None, SPLIT_MXFP4, ws=ws)
    first = case["out"].clone()
    for _ in range(20):  # the last CTA of a tile differs from launch to launch
        poison_(case["out"])
        _run(case, "plain", None, SPLIT_MXFP4, ws=ws)
        assert same_bits(case["out"][:200], first[:200])
    case2 = make_mxfp4_case("plain", [131], k, n, seed=63, device=cuda_device)
    case2["b"], case2["a"][100] = case["b"], case["a"][7]
    case2["pre"][100], case2["scale"][100] = case["pre"][7], case["scale"][7]
    case2["a"][120:] = float("nan")  # other rows (live 120..130, padding beyond) hold NaN
    _run(case2, "plain", None, SPLIT_MXFP4)
    assert same_bits(case2["out"][100], first[7])


def test_a_captured_launch_replays_with_new_counts(cuda_device) -> None:
    k, n = 2048, 192
    case = make_mxfp4_case("plain", [64, 64, 64, 64], k, n, seed=64, device=cuda_device)
    ws = split_workspace_for(case, "plain", SPLIT_MXFP4)
    _run(case, "plain", None, SPLIT_MXFP4, ws=ws)  # compiled and warm
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with capture(graph):
        _launch_only(case, ws)
    for counts in ([1, 0, 0, 0], [0, 64, 3, 0], [17, 1, 0, 64], [0, 0, 0, 0]):
        case["counts"].copy_(torch.tensor(counts, dtype=torch.int32))
        poison_(case["out"])
        graph.replay()
        torch.cuda.synchronize()
        assert int(ws.arrivals.count_nonzero()) == 0, "split-K counters not reset"
        _check(case, "plain", None)  # every live row; rows outside untouched


def _launch_only(case, ws) -> None:  # type: ignore[no-untyped-def]
    from megamoe.experts.api import grouped_gemm

    grouped_gemm(case["a"], case["b"], case["seg"], case["counts"], case["out"], mode="plain",
                 row_scale=case["scale"], config=SPLIT_MXFP4, pre_scale=case["pre"],
                 split_workspace=ws)


def test_a_missed_counter_reset_is_caught(cuda_device) -> None:
    """Planted bug: counters left at ``S`` (as after a launch that never reset them), so no
    CTA reads ``S - 1`` and no tile is stored: the counter check and the row check fail."""
    k, n = 2048, 192
    case = make_mxfp4_case("plain", [5, 70], k, n, seed=65, device=cuda_device)
    ws = split_workspace_for(case, "plain", SPLIT_MXFP4)
    ws.arrivals.fill_(effective_splits(SPLIT_MXFP4, k))
    poison_(case["out"])
    with pytest.raises(AssertionError, match="counters not reset"):
        _run(case, "plain", None, SPLIT_MXFP4, ws=ws)
    with pytest.raises(AssertionError, match="relative L2"):
        _check(case, "plain", None)


@pytest.mark.sanitizer
def test_sanitizer_case_split_k(cuda_device) -> None:
    """Designated small case of the compute-sanitizer suite: both split-K variants on rows
    of two experts (every slice writes its partials, the last reads them, the counters
    return to zero), every live row checked."""
    for _, cfg in SPLIT:
        case = make_mxfp4_case("plain", [5, 70], 512, 192, seed=66, device=cuda_device)
        poison_(case["out"])
        _run(case, "plain", None, cfg)
        _check(case, "plain", None)
