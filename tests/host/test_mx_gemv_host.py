"""The decode-batch GEMV variant on the host (``megamoe.experts.mx_gemv_kernel``; docs/contract.md
s7): which callers get it, what a GEMV config may be, and the refusals before any launch.

- The rule is the capacity in tokens (``GEMV_MAX_ROWS``: the most rows one expert can get),
  never the batch: callers of every format with at most 32 tokens get ``n16gemv4``, more
  tokens or no capacity the wgmma variants; a layer passes its ``C`` (a planted layer that
  passes its route count instead is caught).
- A GEMV config has no other option; its name says what it is.
- A GEMV config with bf16 weights is a ``ConfigError`` before anything runs, and ``out`` is
  untouched.
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


BOUNDS = {"mxfp4": 32, "nvfp4": 32, "mxfp8": 32}
"""The measured bounds (docs/perf.md "Session 31", "Session 32"; MXFP8's, one token until the
folded E4M3 decode, 32 since: "Session 34"), written out here so a change to
``GEMV_MAX_ROWS`` has to change this test too."""


@pytest.mark.parametrize("weights", list(BOUNDS))
@pytest.mark.parametrize("gemm", list(DEEPSEEK))
def test_callers_of_at_most_the_bound_in_tokens_get_the_gemv(gemm: str, weights: str) -> None:
    n, k = DEEPSEEK[gemm]
    bound = BOUNDS[weights]
    assert GEMV_MAX_ROWS == BOUNDS
    for tokens in sorted({1, (bound + 1) // 2, bound}):
        cfg = mx_default_config(n, weights, tokens * 8, k, 256, tokens)
        assert cfg == GEMV_DEFAULT and cfg.name == "n16gemv4", tokens
    for tokens in (bound + 1, 64, None):
        cfg = mx_default_config(n, weights, 32 * 8, k, 256, tokens)
        assert not cfg.gemv_warps and cfg.tile_m == 64, tokens  # the narrow wgmma default


def test_every_format_with_a_gemv_default_compiles_it() -> None:
    assert set(GEMV_MAX_ROWS) == set(GEMV_WEIGHTS)
    for weights in GEMV_WEIGHTS:
        assert GEMV_DEFAULT in CONFIGS_BY_FORMAT[weights]  # compiled, so GPU-tested


def _layer(recipe: str, capacity: int) -> MoELayer:
    return host_layer(LayerConfig(E, K, H, INTER, capacity, recipe=recipe))[0]


@pytest.mark.parametrize(("recipe", "capacity", "gemv"), [
    ("fp8_mxfp4", 1, True), ("fp8_mxfp4", 32, True), ("fp8_mxfp4", 33, False),
    ("nvfp4", 32, True), ("nvfp4", 33, False), ("mxfp8", 32, True), ("mxfp8", 33, False),
    ("bf16", 1, False),
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
        make_gemv("plain", 64, 128, GEMV_DEFAULT, False, "bf16")
    with pytest.raises(ValueError, match="GEMV variant"):
        make_gemv("plain", 64, 128, KernelConfig(64, 4), False)
    with pytest.raises(ValueError, match="multiples"):
        make_gemv("plain", 24, 128, GEMV_DEFAULT, False)
    with pytest.raises(ValueError, match="mode"):
        make_gemv("gelu", 64, 128, GEMV_DEFAULT, False)


def test_a_gemv_config_with_bf16_weights_is_refused_before_anything_runs() -> None:
    case = make_mxfp4_case("plain", [3, 5], 128, 64, seed=7)
    b = torch.randn(2, 64, 128).bfloat16()
    case["out"].fill_(7.0)
    before = case["out"].clone()
    with pytest.raises(ConfigError, match="GEMV variant only for mxfp4 or nvfp4 or mxfp8"):
        api.grouped_gemm(case["a"], b, case["seg"], case["counts"], case["out"],
                         mode="plain", config=GEMV_DEFAULT)
    assert torch.equal(case["out"], before)
