"""The decode-batch GEMV variant on the host (``megamoe.experts.mx_gemv_kernel``; CONTRACTS.md
s7): which callers get it, what a GEMV config may be, and the refusals before any launch.

- The rule is the capacity in tokens (``GEMV_MAX_ROWS``: the most rows one expert can get),
  never the batch: MXFP4 callers with at most 32 tokens get ``n16gemv4``, 33 tokens or no
  capacity the wgmma variants, MXFP8 and NVFP4 never; a layer passes its ``C`` (a planted
  layer that passes its route count instead is caught).
- A GEMV config has no other option; its name says what it is.
- A GEMV config with weights that have none is a ``ConfigError`` before anything runs, and
  ``out`` is untouched.
"""

from __future__ import annotations

import pytest
import torch

from megamoe import ConfigError
from megamoe.experts import api
from megamoe.experts.grouped_gemm_kernel import KernelConfig
from megamoe.experts.mx_gemv_kernel import GEMV_TILE_N, GEMV_WEIGHTS, make_gemv
from megamoe.experts.mxfp4_gemm_kernel import (
    CONFIGS_BY_FORMAT,
    GEMV_DEFAULT,
    GEMV_MAX_ROWS,
    mx_default_config,
)
from megamoe.layer import LayerConfig, MoELayer
from tests.host.test_layer_host import INTER, E, H, K
from tests.host.test_layer_host import _layer as host_layer
from tests.mxfp4_case import make_mxfp4_case

DEEPSEEK = {"fc1": (4096, 7168), "fc2": (7168, 2048)}  # (N, K)


@pytest.mark.parametrize("gemm", list(DEEPSEEK))
def test_mxfp4_callers_of_at_most_32_tokens_get_the_gemv(gemm: str) -> None:
    n, k = DEEPSEEK[gemm]
    assert GEMV_MAX_ROWS == {"mxfp4": 32}  # docs/perf.md "Session 31"
    for tokens in (1, 16, 32):
        cfg = mx_default_config(n, "mxfp4", tokens * 8, k, 256, tokens)
        assert cfg == GEMV_DEFAULT and cfg.name == "n16gemv4", tokens
    for tokens in (33, 64, None):
        cfg = mx_default_config(n, "mxfp4", 32 * 8, k, 256, tokens)
        assert not cfg.gemv_warps and cfg.tile_m == 64, tokens  # the narrow wgmma default


@pytest.mark.parametrize("weights", ["mxfp8", "nvfp4"])
def test_formats_without_a_gemv_never_get_one(weights: str) -> None:
    assert weights not in GEMV_WEIGHTS and weights not in GEMV_MAX_ROWS
    assert not any(c.gemv_warps for c in CONFIGS_BY_FORMAT[weights])
    cfg = mx_default_config(4096, weights, 8, 7168, 256, 1)
    assert not cfg.gemv_warps


def _layer(recipe: str, capacity: int) -> MoELayer:
    return host_layer(LayerConfig(E, K, H, INTER, capacity, recipe=recipe))[0]


@pytest.mark.parametrize(("recipe", "capacity", "gemv"), [
    ("fp8_mxfp4", 1, True), ("fp8_mxfp4", 32, True), ("fp8_mxfp4", 33, False),
    ("mxfp8", 16, False), ("nvfp4", 16, False), ("bf16", 16, False),
])
def test_a_layer_picks_the_gemv_from_its_capacity(recipe: str, capacity: int,
                                                  gemv: bool) -> None:
    layer = _layer(recipe, capacity)
    assert [c.gemv_warps > 0 for c in layer.gemm_configs] == [gemv, gemv]


def test_a_layer_that_passes_its_routes_as_tokens_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: 32 tokens at K = 2 are 64 routes; read as tokens they lose the GEMV,
    which the test above refuses."""
    real = api.gemm_config
    monkeypatch.setattr(api, "gemm_config", lambda weights, n, routes=None, k=None,
                        experts=None, tokens=None: real(weights, n, routes, k, experts, routes))
    layer = _layer("fp8_mxfp4", 32)
    assert [c.gemv_warps > 0 for c in layer.gemm_configs] != [True, True]


@pytest.mark.parametrize("field", [
    {"tile_n": 64}, {"stages": 2}, {"ws": True}, {"tile_m": 64}, {"specialized": True},
    {"splits": 2}, {"scale_regs": True}, {"halves": True},
])
def test_a_gemv_config_takes_no_other_option(field: dict) -> None:
    base = {"tile_n": GEMV_TILE_N, "stages": 1, "gemv_warps": 4}
    with pytest.raises(ValueError, match="gemv_warps"):
        KernelConfig(**{**base, **field})
    assert KernelConfig(**base).name == "n16gemv4"
    with pytest.raises(ValueError, match="gemv_warps"):
        KernelConfig(16, 1, gemv_warps=-1)


def test_make_gemv_refuses_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="weights"):
        make_gemv("plain", 64, 128, GEMV_DEFAULT, False, "mxfp8")
    with pytest.raises(ValueError, match="GEMV variant"):
        make_gemv("plain", 64, 128, KernelConfig(64, 4), False)
    with pytest.raises(ValueError, match="multiples"):
        make_gemv("plain", 24, 128, GEMV_DEFAULT, False)
    with pytest.raises(ValueError, match="mode"):
        make_gemv("gelu", 64, 128, GEMV_DEFAULT, False)


@pytest.mark.parametrize("weights", ["mxfp8", "nvfp4"])
def test_a_gemv_config_with_other_weights_is_refused_before_anything_runs(weights) -> None:  # type: ignore[no-untyped-def]
    case = make_mxfp4_case("plain", [3, 5], 128, 64, seed=7, weights=weights)
    case["out"].fill_(7.0)
    before = case["out"].clone()
    with pytest.raises(ConfigError, match="GEMV variant only for mxfp4"):
        api.grouped_gemm(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                         mode="plain", config=GEMV_DEFAULT)
    assert torch.equal(case["out"], before)
