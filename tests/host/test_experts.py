"""The oracle's expert recipes and single-rank forward (docs/contract.md s4, s5, s6, s8).

Known answers are hand-built so that every format is exact (powers of two; the NVFP4 cases
use the global scale ``g = float32(1/3)``, for which a lone power of two ``x`` in a block
gets ``s = x/2`` and decodes to ``(6*s)*g = x`` exactly), so the expected outputs are
written down without running the oracle. Invariants are checked bitwise on random data.
Each important check has a planted-bug test showing it fails on a broken variant.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import oracle.activations as activations_mod
import oracle.experts as experts_mod
import oracle.ffn as ffn_mod
from oracle.combine import masked_combine
from oracle.experts import (
    ROW_TILE,
    MoEConfig,
    expert_terms,
    moe_forward,
    prepare_weights,
    rows_matmul,
    sigmoid_f32,
)
from oracle.formats import (
    dequantize_mxfp4,
    nvfp4_global_scale,
    pack_fp4,
    quantize_mxfp4,
    quantize_mxfp8,
    quantize_nvfp4,
)
from oracle.recipes import CONTRACT_RECIPES, RECIPES, Format
from oracle.routing import stage_routes
from tests.bitwise import as_bytes, same_bits

pytestmark = pytest.mark.usefixtures("one_torch_thread")


THIRD = float(np.float32(1 / 3))  # NVFP4 global scale that makes lone powers of two exact

# ----------------------------------------------------------------------------- helpers

H, INTER, E, K = 64, 32, 4, 2
OUT_COL = {0: 3, 1: 10, 2: 17, 3: 40}  # output column (W2 row) each expert writes




KNOWN_CONFIGS = {
    "bf16": {},
    "mxfp8-e4m3-rceil": {"mxfp8_elem": "e4m3"},
    "mxfp8-e5m2-rceil": {"mxfp8_elem": "e5m2"},
    "mxfp8-e4m3-floor": {"mxfp8_elem": "e4m3", "mxfp8_mode": "floor"},
    "mxfp8-e5m2-floor": {"mxfp8_elem": "e5m2", "mxfp8_mode": "floor"},
    "nvfp4": {"nvfp4_input_scale": THIRD, "nvfp4_a2_scale": THIRD},
    "fp8_mxfp4-rceil": {},
    "fp8_mxfp4-floor": {"mxfp4_mode": "floor"},
}


def _known_config(case: str, **extra: object) -> MoEConfig:
    recipe = case.split("-")[0]
    return MoEConfig(recipe, E, K, H, INTER, **{**KNOWN_CONFIGS[case], **extra})


def _known_float_weights() -> tuple[torch.Tensor, torch.Tensor]:
    """Expert e: gate row e = 16 at column 0, up row I+e = 2**-(2+e) at column 0,
    W2[e][OUT_COL[e], e] = 2**-e; everything else 0. Canonical layout: gate rows first."""
    w13 = torch.zeros(E, 2 * INTER, H)
    w2 = torch.zeros(E, H, INTER)
    for e in range(E):
        w13[e, e, 0] = 16.0
        w13[e, INTER + e, 0] = 2.0 ** -(2 + e)
        w2[e, OUT_COL[e], e] = 2.0**-e
    return w13, w2


def _known_weights(config: MoEConfig):
    w13, w2 = _known_float_weights()
    if config.recipe == "nvfp4":
        return prepare_weights(w13, w2, config, w13_global_scale=THIRD, w2_global_scale=THIRD)
    return prepare_weights(w13, w2, config)


def _known_inputs():
    """Token 0: hidden[0, 0] = 2, experts (0, 1), scores (0.5, 0.25);
    token 1: hidden[1, 0] = 4, experts (2, masked with a NaN score), score 0.125;
    token 2: hidden all NaN, both slots masked (scores +Inf, -Inf)."""
    hidden = torch.zeros(3, H)
    hidden[0, 0], hidden[1, 0] = 2.0, 4.0
    hidden[2] = float("nan")
    ids = torch.tensor([[0, 1], [2, -1], [-1, -1]], dtype=torch.int64)
    scores = torch.tensor([[0.5, 0.25], [0.125, float("nan")], [float("inf"), float("-inf")]])
    return hidden.to(torch.bfloat16), ids, scores


def _known_expected() -> torch.Tensor:
    """Worked by hand (sigmoid(32) and sigmoid(64) round to exactly 1.0 in float32):

    token 0, expert 0: gate = 2*16 = 32, up = 2/4 = 0.5, act = 16, * 0.5 = 8, h2 = 8 * 1 = 8;
    token 0, expert 1: gate = 32, up = 2/8 = 0.25, act = 8, * 0.25 = 2, h2 = 2 * 0.5 = 1;
    token 1, expert 2: gate = 64, up = 4/16 = 0.25, act = 16, * 0.125 = 2, h2 = 2 * 0.25 = 0.5;
    token 2: no active slot -> +0.0. Late weighting gives the same (all powers of two).
    """
    out = torch.zeros(3, H)
    out[0, OUT_COL[0]] = 8.0
    out[0, OUT_COL[1]] = 1.0
    out[1, OUT_COL[2]] = 0.5
    return out.to(torch.bfloat16)


def known_answer_failures(forward, config: MoEConfig) -> list[str]:
    """Run ``forward`` on the hand-built case; describe every output that is not expected."""
    hidden, ids, scores = _known_inputs()
    got = forward(hidden, ids, scores, _known_weights(config), config)
    want = _known_expected()
    bad = (as_bytes(got) != as_bytes(want)).view(3, H, 2).any(dim=2).nonzero().tolist()
    return [f"out[{t}, {c}] = {float(got[t, c])}, expected {float(want[t, c])}" for t, c in bad]


def random_case(recipe: str, tokens: int, seed: int, *, experts: int = 8, top_k: int = 3, **cfg):
    """Random weights and routes; about a quarter of the slots masked, NaN/Inf behind them."""
    g = torch.Generator().manual_seed(seed)
    extra = {"nvfp4_input_scale": 0.01, "nvfp4_a2_scale": 0.005} if recipe == "nvfp4" else {}
    config = MoEConfig(recipe, experts, top_k, H, INTER, **{**extra, **cfg})
    w13 = torch.randn(experts, 2 * INTER, H, generator=g) * H**-0.5
    w2 = torch.randn(experts, H, INTER, generator=g) * INTER**-0.5
    weights = prepare_weights(w13, w2, config)
    hidden = torch.randn(tokens, H, generator=g).to(torch.bfloat16)
    ids = torch.rand(tokens, experts, generator=g).argsort(dim=1)[:, :top_k]
    masked = torch.rand(tokens, top_k, generator=g) < 0.25
    ids = torch.where(masked, torch.full_like(ids, -1), ids)
    scores = torch.rand(tokens, top_k, generator=g) * 0.9 + 0.05
    junk = torch.tensor([float("nan"), float("inf"), float("-inf")])
    scores = torch.where(masked, junk[torch.randint(0, 3, ids.shape, generator=g)], scores)
    return config, weights, hidden, ids, scores



# ----------------------------------------------------------------------------- recipe table


@pytest.mark.contract("s5.ffn-recipes", "s8.row-tolerance")
def test_recipe_table_matches_contract_section_5():
    table = {n: (r.a1, r.weights, r.a2, r.rel_l2_tolerance) for n, r in RECIPES.items()}
    assert table == {
        "bf16": (Format.BF16, Format.BF16, Format.BF16, 0.01),
        "mxfp8": (Format.MXFP8, Format.MXFP8, Format.MXFP8, 0.02),
        "nvfp4": (Format.NVFP4, Format.NVFP4, Format.NVFP4, 0.06),
        "fp8_mxfp4": (Format.SAFE_FP8, Format.MXFP4, Format.SAFE_FP8, 0.025),
        "fp8_block": (Format.FP8_BLOCK, Format.FP8_BLOCK, Format.FP8_BLOCK, 0.02),  # s12
        "fp8_block_fi": (Format.FP8_BLOCK, Format.FP8_BLOCK_FI, Format.FP8_BLOCK_FI, 0.02),
    }


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"recipe": "fp16"}, "recipe"),
        ({"num_experts": 0}, "num_experts"),
        ({"top_k": True}, "top_k"),
        ({"recipe": "mxfp8", "hidden_size": 48}, "hidden_size"),
        ({"recipe": "nvfp4", "intermediate_size": 24}, "intermediate_size"),
        ({"clamp": -1.0}, "clamp"),
        ({"clamp": float("inf")}, "clamp"),
        ({"late_weighting": 1}, "late_weighting"),
        ({"mxfp8_elem": "e3m4"}, "mxfp8_elem"),
        ({"mxfp8_mode": "ceil"}, "mxfp8_mode"),
        ({"mxfp4_mode": "even"}, "mxfp4_mode"),
        ({"nvfp4_input_scale": 0.0}, "nvfp4_input_scale"),
        ({"nvfp4_a2_scale": float("nan")}, "nvfp4_a2_scale"),
    ],
)
def test_config_rejects_bad_field_naming_it(kwargs, field):
    base = {"recipe": "bf16", "num_experts": 4, "top_k": 2, "hidden_size": 64}
    base["intermediate_size"] = 32
    with pytest.raises(ValueError, match=field):
        MoEConfig(**{**base, **kwargs})


def test_config_accepts_bf16_with_odd_sizes():
    config = MoEConfig("bf16", 3, 2, 24, 5, clamp=7)
    assert config.clamp == 7.0 and config.spec is RECIPES["bf16"]


# ----------------------------------------------------------------------------- weights


@pytest.mark.contract("s5.ffn-recipes")
def test_prepare_weights_quantizes_each_format_along_k():
    g = torch.Generator().manual_seed(1)
    w13, w2 = torch.randn(2, 64, 64, generator=g), torch.randn(2, 64, 32, generator=g)
    mx = prepare_weights(w13, w2, MoEConfig("mxfp8", 2, 1, 64, 32, mxfp8_mode="floor"))
    p, s = quantize_mxfp8(w13, elem="e4m3", mode="floor")
    assert same_bits(mx.w13, p) and same_bits(mx.w13_scale, s)
    fp4 = prepare_weights(w13, w2, MoEConfig("fp8_mxfp4", 2, 1, 64, 32))
    p, s = quantize_mxfp4(w2)
    assert same_bits(fp4.w2, p) and same_bits(fp4.w2_scale, s)
    bf = prepare_weights(w13, w2, MoEConfig("bf16", 2, 1, 64, 32))
    assert same_bits(bf.w13, w13.to(torch.bfloat16))


@pytest.mark.contract("s4.nvfp4")
def test_prepare_weights_nvfp4_global_scale_is_per_expert_amax_over_2688():
    g = torch.Generator().manual_seed(2)
    w13 = torch.randn(3, 64, 64, generator=g) * torch.tensor([1.0, 100.0, 1e-3]).view(3, 1, 1)
    w2 = torch.randn(3, 64, 32, generator=g)
    w2[1] = 0.0  # an all-zero expert gets g = 1 (any g gives zero codes)
    weights = prepare_weights(w13, w2, MoEConfig("nvfp4", 3, 1, 64, 32))
    amax13 = w13.abs().amax(dim=(1, 2)).numpy().astype(np.float32)
    want13 = amax13 / np.float32(448 * 6)  # one float32 division per expert
    assert np.array_equal(weights.w13_global_scale.numpy(), want13)
    want2 = w2.abs().amax(dim=(1, 2)).numpy().astype(np.float32) / np.float32(2688)
    want2[1] = 1.0
    assert np.array_equal(weights.w2_global_scale.numpy(), want2)
    p, s = quantize_nvfp4(
        w13, global_scale=nvfp4_global_scale(w13.abs().amax(dim=(1, 2))).view(3, 1, 1)
    )
    assert same_bits(weights.w13, p) and same_bits(weights.w13_scale, s)


def test_prepare_weights_accepts_prequantized_and_padded_scales():
    config = MoEConfig("fp8_mxfp4", 2, 1, 64, 32)
    g = torch.Generator().manual_seed(3)
    w13, w2 = torch.randn(2, 64, 64, generator=g), torch.randn(2, 64, 32, generator=g)
    ref = prepare_weights(w13, w2, config)
    padded = torch.zeros(2, 64, 4, dtype=torch.uint8)
    padded[..., :2] = ref.w13_scale
    pre = prepare_weights(ref.w13, ref.w2, config, w13_scale=padded, w2_scale=ref.w2_scale)
    for e in range(2):
        assert same_bits(pre.dequantize_w13(e), ref.dequantize_w13(e))
        assert same_bits(pre.dequantize_w2(e), ref.dequantize_w2(e))


def test_prepare_weights_never_writes_its_inputs():
    w13, w2 = _known_float_weights()
    before = (w13.clone(), w2.clone())
    for case in ("bf16", "nvfp4", "fp8_mxfp4-rceil"):
        _known_weights(_known_config(case))
    assert same_bits(w13, before[0]) and same_bits(w2, before[1])


@pytest.mark.parametrize(
    ("recipe", "kwargs", "argument"),
    [
        ("bf16", {"w2": torch.zeros(4, 32, 64)}, "w2"),  # W2 must be [E, H, I]
        ("mxfp8", {"w13": torch.zeros(4, 64, 64, dtype=torch.uint8)}, "w13"),  # not E4M3
        ("mxfp8", {"w13": torch.zeros(4, 64, 64).to(torch.float8_e4m3fn)}, "w13_scale"),
        ("fp8_mxfp4", {"w2_scale": torch.zeros(4, 64, 3, dtype=torch.uint8)}, "w2"),
        ("nvfp4", {"w13_global_scale": -1.0}, "w13_global_scale"),
        ("bf16", {"w13_global_scale": 1.0}, "w13_global_scale"),
    ],
)
def test_prepare_weights_rejects_bad_input_naming_the_argument(recipe, kwargs, argument):
    config = MoEConfig(recipe, E, K, H, INTER)
    args = {"w13": torch.zeros(E, 2 * INTER, H), "w2": torch.zeros(E, H, INTER)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        prepare_weights(args.pop("w13"), args.pop("w2"), config, **args)


def test_prepare_weights_rejects_non_finite_float_weights():
    w13, w2 = _known_float_weights()
    w2[2, 0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"w2.*expert 2"):
        prepare_weights(w13, w2, MoEConfig("bf16", E, K, H, INTER))


# ----------------------------------------------------------------------------- known answers


@pytest.mark.contract("s4.safe-fp8-row-rule", "s5.ffn-recipes")
@pytest.mark.parametrize("late", [False, True], ids=["early", "late"])
@pytest.mark.parametrize("case", list(KNOWN_CONFIGS))
def test_known_answer_per_recipe(case, late):
    assert known_answer_failures(moe_forward, _known_config(case, late_weighting=late)) == []


@pytest.mark.contract("s5.ffn-recipes")
def test_known_answer_nvfp4_from_hand_packed_weights():
    """The same case with NVFP4 weights written as bytes: code 0b0010 (1.0), 0b0110 (4.0),
    E4M3 block scales, g = 1, so W13 gate = 4 * 4 = 16, up = 1 * 2**-(2+e), W2 = 1 * 2**-e."""
    config = _known_config("nvfp4")
    codes13 = torch.zeros(E, 2 * INTER, H, dtype=torch.uint8)
    scale13 = torch.full((E, 2 * INTER, H // 16), 1.0).to(torch.float8_e4m3fn)
    codes2 = torch.zeros(E, H, INTER, dtype=torch.uint8)
    scale2 = torch.full((E, H, INTER // 16), 1.0).to(torch.float8_e4m3fn)
    for e in range(E):
        codes13[e, e, 0], scale13[e, e, 0] = 0b0110, torch.tensor(4.0).to(torch.float8_e4m3fn)
        codes13[e, INTER + e, 0] = 0b0010
        scale13[e, INTER + e, 0] = torch.tensor(2.0 ** -(2 + e)).to(torch.float8_e4m3fn)
        codes2[e, OUT_COL[e], e] = 0b0010
        scale2[e, OUT_COL[e], e // 16] = torch.tensor(2.0**-e).to(torch.float8_e4m3fn)
    weights = prepare_weights(
        pack_fp4(codes13),
        pack_fp4(codes2),
        config,
        w13_scale=scale13,
        w2_scale=scale2,
        w13_global_scale=1.0,
        w2_global_scale=1.0,
    )
    hidden, ids, scores = _known_inputs()
    assert same_bits(moe_forward(hidden, ids, scores, weights, config), _known_expected())


@pytest.mark.contract("s5.clamp")
def test_known_answer_clamp_limits_gate_above_and_up_both_sides():
    """bf16, c = 32. Token 0 -> expert 0: gate 64 -> 32, up 64 -> 32: act = 1024 (sigmoid(32)
    is 1.0), h2 = 1024 * 2**-10 = 1. Token 1 -> expert 1: gate 64 -> 32, up -64 -> -32,
    h2 = -1024 * 2**-10 = -1. Without the clamp: 4096 * 2**-10 = 4 and -4.
    Token 2 -> expert 2: gate -64 is not clamped from below (``min(gate, c)``), up 1:
    act = silu(-64) = -64 / (1 + e**64), of magnitude below 2**-80, h2 = act * 2**40 below
    2**-40; a gate clamped to -32 would give silu(-32) * 2**40, about -0.45."""
    w13, w2 = torch.zeros(E, 2 * INTER, H), torch.zeros(E, H, INTER)
    for e in (0, 1):
        w13[e, e, 0] = 32.0
        w13[e, INTER + e, 0] = 32.0 if e == 0 else -32.0
        w2[e, OUT_COL[e], e] = 2.0**-10
    w13[2, 2, 0], w13[2, INTER + 2, 0], w2[2, OUT_COL[2], 2] = -32.0, 0.5, 2.0**40
    hidden = torch.zeros(3, H, dtype=torch.bfloat16)
    hidden[:, 0] = 2.0
    ids = torch.tensor([[0, -1], [1, -1], [2, -1]])
    scores = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    for clamp, value in ((32.0, 1.0), (None, 4.0)):
        config = MoEConfig("bf16", E, K, H, INTER, clamp=clamp)
        out = moe_forward(hidden, ids, scores, prepare_weights(w13, w2, config), config)
        want = torch.zeros(2, H, dtype=torch.bfloat16)
        want[0, OUT_COL[0]], want[1, OUT_COL[1]] = value, -value
        assert same_bits(out[:2], want), clamp
        below = float(out[2, OUT_COL[2]])
        assert -(2.0**-40) < below < 0, (clamp, below)
        assert same_bits(out[2].clone().index_fill_(0, torch.tensor([OUT_COL[2]]), 0),
                         torch.zeros(H, dtype=torch.bfloat16)), clamp


def _weighting_case(late: bool) -> torch.Tensor:
    """mxfp8 E4M3: act = (1, 1.125) in one A2 block, score 1.5, W2 picks act[1].

    early: A2 = quantize(1.5, 1.6875): amax 1.6875 -> e = ceil(log2(1.6875/448)) = -8,
           payload (384, 432); 432 is a tie between 416 and 448 -> 448 (even) -> 1.75.
    late:  A2 = quantize(1, 1.125): e = -8, payload (256, 288) exact -> h2 = 1.125 * 1.5.
    """
    w13, w2 = torch.zeros(1, 2 * INTER, H), torch.zeros(1, H, INTER)
    w13[0, 0, 0] = w13[0, 1, 0] = 32.0  # gate 32 -> sigmoid exactly 1
    w13[0, INTER, 0], w13[0, INTER + 1, 0] = 2.0**-5, 1.125 * 2.0**-5
    w2[0, 0, 1] = 1.0
    config = MoEConfig("mxfp8", 1, 1, H, INTER, late_weighting=late)
    hidden = torch.zeros(1, H, dtype=torch.bfloat16)
    hidden[0, 0] = 1.0
    out = moe_forward(
        hidden, torch.tensor([[0]]), torch.tensor([[1.5]]), prepare_weights(w13, w2, config), config
    )
    return out[0, 0]


@pytest.mark.contract("s5.weighting")
def test_early_weighting_scales_act_before_a2_quantization():
    assert float(_weighting_case(late=False)) == 1.75


@pytest.mark.contract("s5.weighting")
def test_late_weighting_scales_h2_after_the_w2_gemm():
    assert float(_weighting_case(late=True)) == 1.6875


# ----------------------------------------------------------------------------- planted bugs


def test_planted_bug_swapped_weighting_order_fails_known_answer(monkeypatch):
    real = experts_mod.expert_block

    def swapped(a1, scores, expert, weights, config):
        flipped = dataclasses.replace(config, late_weighting=not config.late_weighting)
        return real(a1, scores, expert, weights, flipped)

    monkeypatch.setattr(experts_mod, "expert_block", swapped)
    assert float(_weighting_case(late=False)) != 1.75
    assert float(_weighting_case(late=True)) != 1.6875


def test_planted_bug_up_rows_first_fails_known_answer(monkeypatch):
    def up_first(h1, intermediate_size):
        return h1[:, intermediate_size:], h1[:, :intermediate_size]

    monkeypatch.setattr(ffn_mod, "split_gate_up", up_first)
    assert known_answer_failures(moe_forward, _known_config("bf16")) != []


@pytest.mark.contract("s5.one-rounding-per-slot")
def test_planted_bug_no_per_slot_rounding_fails_known_answer(monkeypatch):
    """Three slots of one token each give h2 = 1 + 2**-9 + 2**-10, which bf16 rounds to 1,
    so the contract's output is bf16(1 + 1 + 1) = 3; summing the unrounded h2 gives
    3 + 0.0087890625, past half the bf16 spacing (2**-7) at 3, so it rounds to 3.015625."""
    w13, w2 = torch.zeros(E, 2 * INTER, H), torch.zeros(E, H, INTER)
    for e in (0, 1, 2):
        for i, up in enumerate((2.0**-5, 2.0**-14, 2.0**-15)):
            w13[e, i, 0], w13[e, INTER + i, 0] = 32.0, up  # act_i = up * 32
            w2[e, 0, i] = 1.0  # h2 = 1 + 2**-9 + 2**-10, exact in float32
    config = MoEConfig("bf16", E, 3, H, INTER)
    weights = prepare_weights(w13, w2, config)
    hidden = torch.zeros(1, H, dtype=torch.bfloat16)
    hidden[0, 0] = 1.0
    ids, scores = torch.tensor([[0, 1, 2]]), torch.tensor([[1.0, 1.0, 1.0]])
    assert float(moe_forward(hidden, ids, scores, weights, config)[0, 0]) == 3.0

    h2_seen: list[torch.Tensor] = []

    def record(h2):
        h2_seen.append(h2.clone())
        return h2.to(torch.bfloat16)

    monkeypatch.setattr(ffn_mod, "round_terms", record)
    moe_forward(hidden, ids, scores, weights, config)
    assert [float(h[0, 0]) for h in h2_seen] == [1 + 2.0**-9 + 2.0**-10] * 3
    broken = (h2_seen[0] + h2_seen[1] + h2_seen[2]).to(torch.bfloat16)  # unrounded sum
    assert float(broken[0, 0]) == 3.015625 != 3.0


# ----------------------------------------------------------------------------- invariants


@pytest.mark.contract("s2.masked-any-score", "s8.invariance")
@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_masked_slot_scores_nan_inf_or_zero_give_identical_bits(recipe):
    config, weights, hidden, ids, scores = random_case(recipe, 12, seed=10)
    zeroed = torch.where(ids == -1, torch.zeros_like(scores), scores)
    assert bool((scores[ids == -1].isfinite() == False).all())  # noqa: E712
    a = moe_forward(hidden, ids, scores, weights, config)
    b = moe_forward(hidden, ids, zeroed, weights, config)
    assert same_bits(a, b)


@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_permuting_token_rows_permutes_output_rows(recipe):
    config, weights, hidden, ids, scores = random_case(recipe, 20, seed=11)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    a = moe_forward(hidden, ids, scores, weights, config)
    b = moe_forward(hidden[perm], ids[perm], scores[perm], weights, config)
    assert same_bits(a[perm], b)


@pytest.mark.contract("s4.safe-fp8-inactive-row", "s6.inactive-rows-zero")
@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_rows_without_active_slot_are_exactly_positive_zero(recipe):
    config, weights, hidden, ids, scores = random_case(recipe, 10, seed=12)
    ids[3:6] = -1
    scores[3:6] = float("nan")
    hidden[3:6] = float("nan") if recipe != "fp8_mxfp4" else float("inf")
    out = moe_forward(hidden, ids, scores, weights, config)
    assert torch.equal(as_bytes(out[3:6]), torch.zeros_like(as_bytes(out[3:6])))
    assert bool(out.isfinite().all())


@pytest.mark.contract("s8.invariance")
@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_changing_one_row_never_changes_another_rows_output(recipe):
    """Row 5 gets new hidden values, new experts and new scores; its expert changes move
    other rows' experts between row counts that differ in size."""
    config, weights, hidden, ids, scores = random_case(recipe, 24, seed=13)
    before = moe_forward(hidden, ids, scores, weights, config)
    h2, i2, s2 = hidden.clone(), ids.clone(), scores.clone()
    h2[5] = h2[5] * -3.0
    i2[5] = torch.tensor([7, 6, -1])
    s2[5] = torch.tensor([0.3, 0.9, float("nan")])
    after = moe_forward(h2, i2, s2, weights, config)
    keep = torch.arange(24) != 5
    assert same_bits(before[keep], after[keep])
    assert not same_bits(before[5], after[5])


def test_planted_bug_block_wide_a2_scale_breaks_row_independence(monkeypatch):
    """A safe FP8 quantizer applied to the whole expert block instead of per token couples
    rows: the row-independence check must fail."""
    real = ffn_mod.quantize_a2

    def block_wide(act, config):
        q = real(act.reshape(1, -1), config)
        return type(q)(q.fmt, q.payload.reshape(act.shape), q.scale.expand(act.shape[0]))

    monkeypatch.setattr(ffn_mod, "quantize_a2", block_wide)
    with pytest.raises(AssertionError):
        test_changing_one_row_never_changes_another_rows_output("fp8_mxfp4")


def test_rows_matmul_row_bits_do_not_depend_on_row_count_or_position():
    """Rows computed alone, in small groups and in a block spanning several tiles agree
    bitwise; a plain variable-shape matmul does not have to (MKL picks kernels by shape)."""
    g = torch.Generator().manual_seed(14)
    a, w = torch.randn(3 * ROW_TILE + 5, 96, generator=g), torch.randn(40, 96, generator=g)
    full = rows_matmul(a, w)
    for idx in ([0], [1, 2], [7, 3, 150], list(range(0, 3 * ROW_TILE + 5, 7))):
        assert same_bits(rows_matmul(a[idx], w), full[idx])


def test_rows_matmul_bits_do_not_depend_on_threads():
    g = torch.Generator().manual_seed(24)
    a, w = torch.randn(2 * ROW_TILE + 3, 256, generator=g), torch.randn(128, 256, generator=g)
    one = rows_matmul(a, w)
    torch.set_num_threads(2)
    assert same_bits(rows_matmul(a, w), one)


def test_sigmoid_f32_is_position_independent_and_rounded_from_float64():
    x = torch.randn(4099, generator=torch.Generator().manual_seed(15)) * 8
    whole = sigmoid_f32(x)
    pieces = torch.cat([sigmoid_f32(x[i : i + 3]) for i in range(0, 4099, 3)])
    assert same_bits(whole, pieces)
    want = (1 / (1 + np.exp(-x.numpy().astype(np.float64)))).astype(np.float32)
    assert np.array_equal(whole.numpy(), want)
    inf = torch.tensor([float("inf"), float("-inf"), float("nan")])
    assert sigmoid_f32(inf)[:2].tolist() == [1.0, 0.0] and sigmoid_f32(inf)[2].isnan()


@pytest.mark.contract("s5.one-rounding-per-slot")
@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_moe_forward_is_masked_combine_of_expert_terms(recipe):
    config, weights, hidden, ids, scores = random_case(recipe, 9, seed=16)
    s_ids, s_scores = stage_routes(ids, scores, 9)
    terms = expert_terms(hidden, s_ids, s_scores, weights, config)
    assert bool((as_bytes(terms[s_ids == -1]) == 0).all())  # masked slots hold +0.0
    out = moe_forward(hidden, ids, scores, weights, config)
    assert same_bits(out, masked_combine(terms, s_ids))


@pytest.mark.contract("s1.route-dtypes-and-layouts", "s3.no-stray-writes")
def test_inputs_are_never_written_and_any_strides_accepted():
    config, weights, hidden, ids, scores = random_case("mxfp8", 8, seed=17)
    wide_ids = torch.full((8, 6), 99, dtype=torch.int32)
    wide_ids[:, ::2] = ids.to(torch.int32)
    wide_scores = torch.zeros(8, 6, dtype=torch.float64)
    wide_scores[:, ::2] = scores.to(torch.float64)
    copies = [t.clone() for t in (hidden, wide_ids, wide_scores)]
    out = moe_forward(hidden, wide_ids[:, ::2], wide_scores[:, ::2], weights, config)
    assert same_bits(out, moe_forward(hidden, ids, scores, weights, config))
    for t, c in zip((hidden, wide_ids, wide_scores), copies, strict=True):
        assert same_bits(t, c)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (lambda h, i, s: (h.float(), i, s), "hidden.*bfloat16"),
        (lambda h, i, s: (h[:, :32], i, s), r"hidden.*\[T, 64\]"),
        (lambda h, i, s: (h, i[:, :2], s), r"topk_ids.*\[8, 3\]"),
        (lambda h, i, s: (h, i.float(), s), "topk_ids.*dtype"),
        (lambda h, i, s: (h, torch.where(i == 2, 8, i), s), "id_out_of_range"),
        (lambda h, i, s: (h, i, torch.where(i >= 0, float("nan"), s)), "non_finite_score"),
    ],
)
def test_bad_input_raises_value_error_naming_it(change, pattern):
    config, weights, hidden, ids, scores = random_case("bf16", 8, seed=18)
    ids[0] = torch.tensor([2, 1, 0])
    with pytest.raises(ValueError, match=pattern):
        moe_forward(*change(hidden, ids, scores), weights, config)


@pytest.mark.contract("s2.caller-dtype-checks")
def test_int64_id_of_2_pow_32_is_out_of_range_not_wrapped():
    config, weights, hidden, ids, scores = random_case("bf16", 4, seed=19)
    ids[1, 0] = 2**32
    with pytest.raises(ValueError, match="id_out_of_range"):
        moe_forward(hidden, ids, scores, weights, config)


def test_weights_of_another_recipe_are_rejected():
    config, weights, hidden, ids, scores = random_case("bf16", 4, seed=20)
    with pytest.raises(ValueError, match=r"weights\.recipe"):
        moe_forward(hidden, ids, scores, weights, dataclasses.replace(config, recipe="mxfp8"))


@pytest.mark.contract("s4.safe-fp8-row-rule")
def test_fp8_mxfp4_rejects_non_finite_live_row():
    config, weights, hidden, ids, scores = random_case("fp8_mxfp4", 4, seed=21)
    ids[2, 0] = 1 if int(ids[2, 1]) != 1 and int(ids[2, 2]) != 1 else 0
    scores[2, 0] = 0.5
    hidden[2, 7] = float("inf")
    with pytest.raises(ValueError, match=r"hidden\[2\]"):
        moe_forward(hidden, ids, scores, weights, config)


@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_empty_batch_gives_empty_output(recipe):
    config, weights, hidden, ids, scores = random_case(recipe, 3, seed=22)
    out = moe_forward(hidden[:0], ids[:0], scores[:0], weights, config)
    assert out.shape == (0, H) and out.dtype == torch.bfloat16


# ----------------------------------------------------------------------------- tiny values


def _tiny_case(amplitude: float, scale_raise: int):
    """fp8_mxfp4, one expert, K = 1, score 1: hidden = amplitude * N(0, 1) (bf16)."""
    g = torch.Generator().manual_seed(23)
    config = MoEConfig("fp8_mxfp4", 1, 1, H, INTER)
    w13 = torch.randn(1, 2 * INTER, H, generator=g) * 0.5
    w2 = torch.randn(1, H, INTER, generator=g) * 0.5
    p13, s13 = quantize_mxfp4(w13)
    p2, s2 = quantize_mxfp4(w2)
    assert int(s13.max()) + scale_raise <= 254
    s13 = s13 + scale_raise  # every W13 scale byte raised: W13 * 2**scale_raise
    weights = prepare_weights(p13, p2, config, w13_scale=s13, w2_scale=s2)
    hidden = (torch.randn(4, H, generator=g) * amplitude).to(torch.bfloat16)
    ids, scores = torch.zeros(4, 1, dtype=torch.int64), torch.ones(4, 1)
    # Independent float64 estimate of the A2 input, to say which quantizer path each row takes.
    w13_f = dequantize_mxfp4(p13[0], s13[0]).double()
    h1 = hidden.double() @ w13_f.T
    gate, up = h1[:, :INTER], h1[:, INTER:]
    act = up * gate * torch.sigmoid(gate)
    ideal = act @ dequantize_mxfp4(p2[0], s2[0]).double().T
    return config, weights, hidden, ids, scores, act.abs().amax(dim=1), ideal


TINY = 448e-30
SAFE_MIN = 1.3165537626040637e-36


@pytest.mark.parametrize(
    ("amplitude", "scale_raise", "a1_path", "a2_path"),
    [
        # A1 row amax ~1e-15 >= TINY: normal path; act ~1e-30 < TINY: tiny path for A2.
        (1e-15, 0, "normal", "tiny"),
        # act ~1e-36: the tiny path, q = 448 / amax (amax above SAFE_MIN).
        (1e-18, 0, "normal", "tiny"),
        # act ~1e-38 < SAFE_MIN: the tiny path with q clamped to FLT_MAX (d = 1/FLT_MAX).
        (1e-19, 0, "normal", "tiny-below-safe-min"),
        # A1 amax ~1e-35 < TINY: the tiny path for A1 too; W13 * 2**55 brings act back up.
        (1e-35, 55, "tiny", "tiny"),
    ],
)
def test_tiny_values_give_finite_nonzero_outputs_fp8_mxfp4(
    amplitude, scale_raise, a1_path, a2_path
):
    config, weights, hidden, ids, scores, act_amax, ideal = _tiny_case(amplitude, scale_raise)
    a1_amax = hidden.float().abs().amax(dim=1)
    assert bool((a1_amax < TINY).all()) == (a1_path == "tiny")
    assert bool((a1_amax >= TINY).all()) == (a1_path == "normal")
    assert bool((act_amax < TINY).all()) and bool((act_amax > 0).all())
    assert bool((act_amax < SAFE_MIN).all()) == (a2_path == "tiny-below-safe-min")
    out = moe_forward(hidden, ids, scores, weights, config)
    assert bool(out.isfinite().all())
    assert bool((out.float().abs().amax(dim=1) > 0).all())
    # And the values carry the information: against float64 math on the unquantized
    # activations, tiny rows are about as accurate as the same case at amplitude 1
    # (E4M3 A1 and A2 cost a few percent there too).
    err = (out.double() - ideal).norm(dim=1) / ideal.norm(dim=1)
    config, weights, hidden, ids, scores, _, ideal = _tiny_case(1.0, 0)
    unit = moe_forward(hidden, ids, scores, weights, config)
    unit_err = (unit.double() - ideal).norm(dim=1) / ideal.norm(dim=1)
    assert float(err.max()) <= 1.5 * float(unit_err.max()) < 0.15, (err, unit_err)


def test_planted_bug_quantizer_without_tiny_path_zeroes_tiny_outputs(monkeypatch):
    """Safe FP8 with only the normal path (d = max(amax/448, 1e-30)) flushes the 1e-35 rows
    to zero payload; the tiny-value check must fail."""
    from oracle.formats import cast_e4m3

    def normal_only(x):
        xf = x.to(torch.float32)
        amax = xf.abs().amax(dim=1)
        d = torch.clamp(amax * np.float32(1 / 448), min=1e-30)
        return cast_e4m3(xf / d.unsqueeze(1)), d

    monkeypatch.setattr(activations_mod, "safe_fp8_quantize", normal_only)
    with pytest.raises(AssertionError):
        test_tiny_values_give_finite_nonzero_outputs_fp8_mxfp4(1e-35, 55, "tiny", "tiny")


# ----------------------------------------------------------------------------- prequantized A1


@pytest.mark.contract("s1.hidden-formats")
@pytest.mark.parametrize("elem", ["e4m3", "e5m2"])
def test_prequantized_mxfp8_hidden_equals_quantizing_bf16_hidden(elem):
    config, weights, hidden, ids, scores = random_case("mxfp8", 10, seed=40, mxfp8_elem=elem)
    payload, scale = quantize_mxfp8(hidden, elem=elem)
    padded = torch.zeros(10, 4, dtype=torch.uint8)
    padded[:, :2] = scale
    for s in (scale, padded, scale.view(torch.float8_e8m0fnu)):
        a1 = experts_mod.prequantized_a1(payload, s, config)
        got = moe_forward(a1, ids, scores, weights, config)
        assert same_bits(got, moe_forward(hidden, ids, scores, weights, config))


@pytest.mark.contract("s1.hidden-formats")
def test_prequantized_nvfp4_hidden_uses_the_layer_input_scale():
    config, weights, hidden, ids, scores = random_case("nvfp4", 10, seed=41)
    packed, scale = quantize_nvfp4(hidden, global_scale=config.nvfp4_input_scale)
    a1 = experts_mod.prequantized_a1(packed.view(torch.float4_e2m1fn_x2), scale, config)
    got = moe_forward(a1, ids, scores, weights, config)
    assert same_bits(got, moe_forward(hidden, ids, scores, weights, config))
    wrong_g = dataclasses.replace(a1, global_scale=1.0)
    with pytest.raises(ValueError, match="global_scale"):
        moe_forward(wrong_g, ids, scores, weights, config)


@pytest.mark.contract("s2.metadata-checks")
@pytest.mark.parametrize(
    ("recipe", "payload", "scale", "pattern"),
    [
        (
            "mxfp8",
            torch.zeros(3, 64).to(torch.float8_e5m2),
            torch.zeros(3, 2, dtype=torch.uint8),
            "payload.*float8_e4m3fn",
        ),
        (
            "mxfp8",
            torch.zeros(3, 64).to(torch.float8_e4m3fn),
            torch.zeros(3, 3, dtype=torch.uint8),
            r"scale.*\[3, n\]",
        ),
        (
            "nvfp4",
            torch.zeros(3, 64, dtype=torch.uint8),
            torch.zeros(3, 4).to(torch.float8_e4m3fn),
            r"payload.*\[3, 32\]",
        ),
        ("bf16", torch.zeros(3, 64), torch.zeros(3, 2), "recipe"),
    ],
)
def test_prequantized_a1_rejects_bad_metadata(recipe, payload, scale, pattern):
    config = MoEConfig(recipe, E, K, H, INTER)
    with pytest.raises(ValueError, match=pattern):
        experts_mod.prequantized_a1(payload, scale, config)
