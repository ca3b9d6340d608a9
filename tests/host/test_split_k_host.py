"""Split-K variants of the MX GEMMs on the host (``megamoe.experts.split_k``; docs/contract.md s7).

- Slices: at most one per k tile; counters: one per output tile of the grid.
- The workspace is required exactly when the variant splits, and each of its metadata
  rules gives a ``ConfigError`` naming it before any launch, with ``out`` untouched.
- Split-K is never a default variant (``SPLIT_K_NOTE``).
"""

from __future__ import annotations

import pytest
import torch

from megamoe.errors import ConfigError
from megamoe.experts import api
from megamoe.experts.grouped_gemm_kernel import TILE_K, KernelConfig
from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT, mx_default_config
from megamoe.experts.split_k import SplitKWorkspace, arrival_slots, effective_splits
from tests.host.test_grouped_gemm_host import POISON, live_mask, poison_
from tests.mxfp4_case import make_mxfp4_case

SPLIT4 = KernelConfig(64, 3, tile_m=64, specialized=True, splits=4)


def test_config_names_and_bounds() -> None:
    assert SPLIT4.name == "m64n64s3wsk4"
    assert KernelConfig(64, 3, tile_m=64, specialized=True).name == "m64n64s3ws"
    with pytest.raises(ValueError, match="splits"):
        KernelConfig(64, 3, splits=0)


@pytest.mark.parametrize(("k", "want"), [(64, 1), (128, 2), (256, 4), (640, 4), (7168, 4)])
def test_a_slice_never_goes_without_a_k_tile(k, want) -> None:
    assert effective_splits(SPLIT4, k) == want
    assert k // TILE_K >= effective_splits(SPLIT4, k)


def test_one_counter_per_output_tile_of_the_grid() -> None:
    assert arrival_slots(SPLIT4, 1, 64) == 1
    assert arrival_slots(SPLIT4, 129, 4096) == 3 * 64
    ws = SplitKWorkspace.create(SPLIT4, 256, 640, 1000, 17, "cpu")
    assert tuple(ws.partials.shape) == (4, 17, 256) and ws.partials.dtype == torch.float32
    assert ws.arrivals.numel() == arrival_slots(SPLIT4, 1000, 256)
    assert int(ws.arrivals.count_nonzero()) == 0


@pytest.mark.parametrize("kind", list(CONFIGS_BY_FORMAT))
@pytest.mark.parametrize("n", [4096, 7168, 5760, 2880])
@pytest.mark.parametrize("routes", [None, 1, 8, 128, 8192, 10**6])
def test_split_k_is_never_a_default(kind, n, routes) -> None:
    """``SPLIT_K_NOTE``: measured slower for real decode batches, so only on request."""
    assert mx_default_config(n, kind, routes).splits == 1


def test_the_split_k_variants_are_compiled_specialized_mxfp4_ones() -> None:
    split = [c for kind, cfgs in CONFIGS_BY_FORMAT.items() for c in cfgs if c.splits > 1]
    assert [c.name for c in split] == ["m64n64s3wsk2", "m64n64s3wsk4"]
    assert all(c in CONFIGS_BY_FORMAT["mxfp4"] and c.specialized for c in split)


def _case(mode: str = "plain"):  # type: ignore[no-untyped-def]
    k, n = (640, 256) if mode == "swiglu" else (576, 192)
    return make_mxfp4_case(mode, [3, 0, 70], k, n, seed=71)


def _call(case, cfg, ws, mode="plain"):  # type: ignore[no-untyped-def]
    return api.grouped_gemm(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                            mode=mode, row_scale=case["scale"], pre_scale=case["pre"],
                            config=cfg, split_workspace=ws)


def _ws(case, cfg=SPLIT4, rows=None):  # type: ignore[no-untyped-def]
    m_cap, k = case["a"].shape
    return SplitKWorkspace.create(cfg, case["out"].shape[1], k, m_cap,
                                  m_cap if rows is None else rows, "cpu")


def _bad_workspaces(case):  # type: ignore[no-untyped-def]
    good = _ws(case)
    p, a = good.partials, good.arrivals
    return {
        "split_workspace": [None, (p, a)],
        "split_workspace.partials": [
            SplitKWorkspace(p[:3], a),                           # S: 3, not 4
            SplitKWorkspace(p[:, :, :64].contiguous(), a),        # N: 64, not 192
            SplitKWorkspace(p.double(), a),                       # dtype
            SplitKWorkspace(p.transpose(1, 2), a),                # not contiguous
            SplitKWorkspace(p[0], a),                             # 2-D
        ],
        "split_workspace.arrivals": [
            SplitKWorkspace(p, a[:-1]),                           # one counter short
            SplitKWorkspace(p, a.long()),                         # dtype
        ],
    }


@pytest.mark.parametrize("argument", ["split_workspace", "split_workspace.partials",
                                      "split_workspace.arrivals"])
def test_bad_split_workspaces_are_refused_naming_the_argument(argument) -> None:
    case = _case()
    for ws in _bad_workspaces(case)[argument]:
        poison_(case["out"])
        with pytest.raises(ConfigError) as info:
            _call(case, SPLIT4, ws)
        assert info.value.argument == argument, (info.value, ws)
        assert bool((case["out"].view(torch.int16) == POISON).all()), "out was written"


def test_a_workspace_for_a_variant_without_split_k_is_refused() -> None:
    case = _case()
    plain = KernelConfig(64, 3, tile_m=64, specialized=True)
    with pytest.raises(ConfigError) as info:
        _call(case, plain, _ws(case))
    assert info.value.argument == "split_workspace"


@pytest.mark.parametrize("cfg", [KernelConfig(64, 4, splits=4), KernelConfig(64, 8, splits=2)],
                         ids=["mx-not-specialized", "bf16-shaped"])
def test_split_k_outside_a_specialized_mx_variant_is_refused(cfg) -> None:
    case = _case()
    with pytest.raises(ConfigError) as info:
        _call(case, cfg, _ws(case, cfg))
    assert info.value.argument == "config"
    bf16 = case["b"].dequantize().to(torch.bfloat16)
    with pytest.raises(ConfigError) as info:
        api.grouped_gemm(case["a"], bf16, case["seg"], case["counts"], case["out"],
                         mode="plain", config=SPLIT4, split_workspace=_ws(case))
    assert info.value.argument == "config"


def test_with_a_good_workspace_the_cpu_takes_the_torch_path() -> None:
    case = _case()
    want = torch.empty_like(case["out"])
    api.grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], want,
                           mode="plain", row_scale=case["scale"], pre_scale=case["pre"])
    assert _call(case, SPLIT4, _ws(case, rows=73)) == api.PATH_TORCH
    live = live_mask(case["seg"].tolist(), case["counts"].tolist(), case["out"].shape[0])
    assert int(live.sum()) == 73
    assert torch.equal(case["out"][live], want[live])
