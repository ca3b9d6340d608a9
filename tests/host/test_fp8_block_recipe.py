"""The ``fp8_block`` recipe (docs/contract.md s12): the oracle's forward against an independent
model written here in numpy and ml_dtypes (float32 operations one at a time, E4M3 casts by
ml_dtypes), bit for bit, on cases built so that every GEMM has one non-zero product per output
element; the weights take one scale per 128 x 128 tile; A2 is FP8 (a bf16 A2 would pass the
tolerance but not these bits); and the recipe table carries it beside the contract's four."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oracle.experts import MoEConfig, moe_forward, prepare_weights
from oracle.recipes import CONTRACT_RECIPES, RECIPES, Format, get_recipe
from tests.host.fp8_block_model import (
    F32,
    block_d,
    one_expert_case,
    rows_roundtrip,
    sigmoid,
    tile_roundtrip,
)

H = INTER = 128


def _case(seed: int):  # type: ignore[no-untyped-def]
    return one_expert_case(seed, H, INTER, up_scale=0.3)


def _bf16_rows(v: np.ndarray) -> np.ndarray:
    """A near miss of the recipe's A2: bf16 values instead of FP8 blocks."""
    return torch.from_numpy(v).bfloat16().float().numpy()


def _model(w13, w2, x, scores, late: bool, a2_rows=rows_roundtrip) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The recipe, written out: K = 1, so the output row is the combine of the slot's one
    term. ``a2_rows`` quantizes and dequantizes A2 (the recipe: FP8 in 1 x 128 blocks)."""
    a1 = rows_roundtrip(x)
    w13_q = np.concatenate([tile_roundtrip(w13[:INTER]), tile_roundtrip(w13[INTER:])])
    w2_q = tile_roundtrip(w2)
    gate = a1[:, 0:1] * w13_q[np.arange(INTER), 0][None, :]  # one product per element
    up = a1[:, 1:2] * w13_q[INTER + np.arange(INTER), 1][None, :]
    act = up * gate * sigmoid(gate)
    if not late:
        act = act * scores[:, None]
    a2 = a2_rows(act)
    h2 = a2[:, np.arange(H)] * w2_q[np.arange(H), np.arange(H)][None, :]
    if late:
        h2 = h2 * scores[:, None]
    term = torch.from_numpy(h2).bfloat16().float().numpy()
    out = F32(0.0) + term  # s6: the combine's float32 sum starts at +0.0 (-0.0 terms give +0.0)
    return torch.from_numpy(out).bfloat16().view(torch.int16).numpy()


def _oracle(w13, w2, x, scores, late: bool):  # type: ignore[no-untyped-def]
    """The oracle's output bits (int16) for the case, and its prepared weights."""
    config = MoEConfig("fp8_block", 1, 1, H, INTER, late_weighting=late)
    weights = prepare_weights(torch.from_numpy(w13)[None], torch.from_numpy(w2)[None], config)
    out = moe_forward(torch.from_numpy(x).bfloat16(), torch.zeros(3, 1, dtype=torch.int64),
                      torch.from_numpy(scores)[:, None], weights, config)
    return out.view(torch.int16).numpy(), weights


@pytest.mark.contract("s12.fp8-block-recipe")
@pytest.mark.parametrize("late", [False, True], ids=["early", "late"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_oracle_forward_equals_an_independent_model_bit_for_bit(seed: int, late: bool
                                                                    ) -> None:
    w13, w2, x, scores = _case(seed)
    out, _ = _oracle(w13, w2, x, scores, late)
    assert np.array_equal(out, _model(w13, w2, x, scores, late))


@pytest.mark.contract("s12.fp8-block-recipe")
def test_a_bf16_a2_changes_the_bits_and_each_weight_tile_has_one_scale() -> None:
    """The bit-for-bit test above can fail: the same model with a bf16 A2 differs from the
    oracle; and the weights carry one scale per 128 x 128 tile, the tile's ``d``."""
    w13, w2, x, scores = _case(0)
    out, weights = _oracle(w13, w2, x, scores, False)
    assert not np.array_equal(out, _model(w13, w2, x, scores, False, a2_rows=_bf16_rows))
    assert weights.w13_scale.shape == (1, 2, 1) and weights.w2_scale.shape == (1, 1, 1)
    want = block_d(np.abs(w13[:INTER]).max())
    assert weights.w13_scale[0, 0, 0].item() == float(want)


@pytest.mark.contract("s12.fp8-block-recipe", "s12.fp8-block-fi-recipe")
@pytest.mark.parametrize(("name", "formats", "too_small"), [
    ("fp8_block", (Format.FP8_BLOCK,) * 3, ("hidden_size", 64, 128)),
    ("fp8_block_fi", (Format.FP8_BLOCK, Format.FP8_BLOCK_FI, Format.FP8_BLOCK_FI),
     ("intermediate_size", 128, 64)),
])
def test_the_recipe_table_carries_the_extension_beside_the_contract_recipes(
        name: str, formats: tuple, too_small: tuple) -> None:
    """Both s12 recipes beside the contract's four; H and I multiples of 128 (the tiles; the
    64-blocks of ``fp8_block_fi``'s A2 divide them)."""
    assert set(RECIPES) == {*CONTRACT_RECIPES, "fp8_block", "fp8_block_fi"}
    r = get_recipe(name)
    assert (r.a1, r.weights, r.a2, r.rel_l2_tolerance) == (*formats, 0.02)
    assert (r.hidden_multiple, r.intermediate_multiple) == (128, 128)
    field, h, i = too_small
    with pytest.raises(ValueError, match=f"{field}: expected a multiple of 128"):
        MoEConfig(name, 2, 1, h, i)
