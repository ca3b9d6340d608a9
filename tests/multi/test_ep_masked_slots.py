"""Masked slots carry anything (docs/contract.md s2, s6, s7): NaN, +Inf, -Inf, the router's own
score or 0 behind a masked id give the same output bits on every rank, with route value
checks on and off (``MEGAMOE_CHECK_ROUTES``, read at warmup), and rows without an active
slot are exactly +0.0."""

from __future__ import annotations

import pytest
import torch

from megamoe.route_check_setting import ENV_VAR
from tests.multi.ep_world import Verdict, bits, build_layer, config, rank_scenario_inputs, shape_of

MASKED_CONTENTS = (float("nan"), float("inf"), float("-inf"), 0.0, "router")


@pytest.mark.contract("s2.check-routes-switch", "s2.masked-any-score", "s6.inactive-rows-zero", "s8.invariance")
@pytest.mark.parametrize("checks", ["1", "0"])
@pytest.mark.parametrize("recipe", ["bf16", "fp8_mxfp4"])
@pytest.mark.mega_sm107("masked-routes")
def test_masked_slot_contents_never_change_a_bit(moe_backend, world, monkeypatch, recipe,
                                                 checks) -> None:
    monkeypatch.setenv(ENV_VAR, checks)
    shape = shape_of(world)
    layer = build_layer(moe_backend, config(shape, recipe), world, shape, world.device)
    verdict = Verdict()
    try:
        x, ids, w = rank_scenario_inputs(world, shape, "sparse-holes", 29)
        router = torch.rand(w.shape, generator=torch.Generator().manual_seed(world.rank))
        ref = None
        for content in MASKED_CONTENTS:
            fill = router.to(w.device) if content == "router" else torch.full_like(w, content)
            w_c = torch.where(ids == -1, fill, w)
            out = layer.warmup(x, ids, w_c) if ref is None else layer.forward(x, ids, w_c)
            if ref is None:
                ref = out.clone()
                empty = ~(ids != -1).any(dim=1)
                verdict.check(world.rank, "a row without an active slot is not +0.0",
                              bool((bits(out)[empty.cpu()] == 0).all()))
            verdict.equal_bits(world.rank, f"{recipe} checks={checks} masked={content}", out,
                               ref)
    finally:
        layer.destroy()
    verdict.assert_clean(world)
