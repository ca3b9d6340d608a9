"""Properties of the oracle forward over random shapes, routes, masks and splits (CPU).

For any recipe, batch, top-k, mask pattern, weighting mode, clamp and split of the tokens
into an EP world (docs/contract.md s5-s8):

- ``ep_forward`` gives every rank exactly (bitwise) the rows ``moe_forward`` gives for the
  same tokens, whatever the world size;
- a row's output depends on that row alone (changing another row changes nothing);
- rows with no active slot are exactly ``+0.0``; with finite inputs every output is finite.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from oracle.collective import ep_forward
from oracle.experts import MoEConfig, moe_forward, prepare_weights
from tests.bitwise import same_bits

H, INTER = 32, 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")




@st.composite
def cases(draw):
    recipe = draw(st.sampled_from(["bf16", "mxfp8", "nvfp4", "fp8_mxfp4"]))
    experts = draw(st.sampled_from([4, 8]))
    top_k = draw(st.integers(1, min(4, experts)))
    tokens = draw(st.integers(0, 20))
    world = draw(st.sampled_from([p for p in (1, 2, 4, 8) if experts % p == 0]))
    cuts = sorted(draw(st.lists(st.integers(0, tokens), min_size=world - 1, max_size=world - 1)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, tokens], strict=True)]
    extra = {}
    if recipe == "mxfp8":
        extra["mxfp8_elem"] = draw(st.sampled_from(["e4m3", "e5m2"]))
        extra["mxfp8_mode"] = draw(st.sampled_from(["rceil", "floor"]))
    if recipe == "nvfp4":
        extra["nvfp4_input_scale"] = draw(st.sampled_from([1.0, 0.01]))
        extra["nvfp4_a2_scale"] = draw(st.sampled_from([1.0, 0.003]))
    config = MoEConfig(
        recipe,
        experts,
        top_k,
        H,
        INTER,
        clamp=draw(st.sampled_from([None, 0.0, 0.5, 7.0])),
        late_weighting=draw(st.booleans()),
        **extra,
    )
    seed = draw(st.integers(0, 2**31 - 1))
    mask_p = draw(st.sampled_from([0.0, 0.3, 1.0]))
    amplitude = draw(st.sampled_from([1.0, 100.0, 1e-3]))
    return config, sizes, seed, mask_p, amplitude


def _inputs(config: MoEConfig, tokens: int, seed: int, mask_p: float, amplitude: float):
    g = torch.Generator().manual_seed(seed)
    e, k = config.num_experts, config.top_k
    w13 = torch.randn(e, 2 * INTER, H, generator=g) * H**-0.5
    w2 = torch.randn(e, H, INTER, generator=g) * INTER**-0.5
    weights = prepare_weights(w13, w2, config)
    hidden = (torch.randn(tokens, H, generator=g) * amplitude).to(torch.bfloat16)
    ids = torch.rand(tokens, e, generator=g).argsort(dim=1)[:, :k]
    masked = torch.rand(tokens, k, generator=g) < mask_p
    ids = torch.where(masked, torch.full_like(ids, -1), ids)
    scores = torch.rand(tokens, k, generator=g).to(torch.float64)
    scores = torch.where(masked, torch.full_like(scores, float("nan")), scores)
    return weights, hidden, ids, scores


@pytest.mark.contract("s6.inactive-rows-zero", "s7.collective-reference")
@given(cases())
def test_ep_forward_equals_moe_forward_for_any_split(case):
    config, sizes, seed, mask_p, amplitude = case
    weights, hidden, ids, scores = _inputs(config, sum(sizes), seed, mask_p, amplitude)
    single = moe_forward(hidden, ids, scores, weights, config)
    assert bool(single.isfinite().all())
    no_active = (ids == -1).all(dim=1)
    assert bool((single[no_active].view(torch.int16) == 0).all())
    ranks, start = [], 0
    for n in sizes:
        ranks.append((hidden[start : start + n], ids[start : start + n], scores[start : start + n]))
        start += n
    outs = ep_forward(ranks, weights, config, len(sizes))
    assert same_bits(torch.cat(outs), single)


@pytest.mark.contract("s8.invariance")
@given(cases(), st.data())
def test_a_row_output_depends_on_that_row_only(case, data):
    config, sizes, seed, mask_p, amplitude = case
    tokens = sum(sizes)
    if tokens < 2:
        return
    weights, hidden, ids, scores = _inputs(config, tokens, seed, mask_p, amplitude)
    before = moe_forward(hidden, ids, scores, weights, config)
    row = data.draw(st.integers(0, tokens - 1))
    other = data.draw(st.integers(0, tokens - 1))  # row takes another row's content
    hidden, ids, scores = hidden.clone(), ids.clone(), scores.clone()
    hidden[row], ids[row], scores[row] = hidden[other] * 2, ids[other], scores[other]
    after = moe_forward(hidden, ids, scores, weights, config)
    keep = torch.arange(tokens) != row
    assert same_bits(before[keep], after[keep])
