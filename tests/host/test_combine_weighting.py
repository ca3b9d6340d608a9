"""Combine weighting (docs/contract.md s12.combine-weighting): each slot's term is bf16 of the
unweighted ``h2`` and the combine multiplies it by the slot's score, one float32 multiply,
before the float32 slot-order sum. The oracle's combine equals an independent numpy model bit
for bit, masked slots still add nothing (NaN scores and terms behind them included), the
forward and the collective reference agree with it, it differs from late weighting in bits,
and a config asking for both is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oracle.collective import ep_forward
from oracle.combine import masked_combine
from oracle.experts import MoEConfig, expert_terms, moe_forward
from oracle.routing import stage_routes
from tests.host.test_experts import _known_config, known_answer_failures, random_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(terms: torch.Tensor, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """numpy float32, one operation at a time: acc = +0.0; per active slot in slot order,
    acc = acc + float32(score * term); then bf16."""
    t = terms.float().numpy()
    s = scores.numpy().astype(np.float32)
    acc = np.zeros(t.shape[::2], np.float32)
    for k in range(t.shape[1]):
        prod = (s[:, k : k + 1] * t[:, k]).astype(np.float32)
        acc = np.where((ids[:, k] != -1).numpy()[:, None], (acc + prod).astype(np.float32), acc)
    return torch.from_numpy(acc).bfloat16()


def _terms_case(seed: int):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    terms = (torch.randn(9, 4, 64, generator=g) * 3).bfloat16()
    ids = torch.randint(0, 8, (9, 4), generator=g)
    ids[torch.rand(9, 4, generator=g) < 0.3] = -1
    ids[2] = -1  # a row with no active slot
    scores = torch.rand(9, 4, generator=g) * 1.7 + 0.01
    return terms, ids, scores


@pytest.mark.contract("s12.combine-weighting")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_weighted_combine_equals_an_independent_model_bit_for_bit(seed: int) -> None:
    terms, ids, scores = _terms_case(seed)
    got = masked_combine(terms, ids, scores)
    assert torch.equal(got.view(torch.int16), _model(terms, ids, scores).view(torch.int16))
    assert torch.equal(got[2].view(torch.int16), torch.zeros(64, dtype=torch.int16))
    assert not torch.equal(got.view(torch.int16), masked_combine(terms, ids).view(torch.int16))


@pytest.mark.contract("s12.combine-weighting", "s6.inactive-rows-zero")
def test_nan_behind_masked_slots_never_reaches_the_weighted_sum() -> None:
    terms, ids, scores = _terms_case(3)
    masked = ids == -1
    poisoned_terms = torch.where(masked.unsqueeze(-1), torch.tensor(float("nan")).bfloat16(),
                                 terms)
    poisoned_scores = torch.where(masked, float("nan"), scores)
    want = masked_combine(terms, ids, scores).view(torch.int16)
    assert torch.equal(masked_combine(poisoned_terms, ids, poisoned_scores).view(torch.int16),
                       want)


@pytest.mark.contract("s12.combine-weighting")
def test_the_forward_weights_in_the_combine_and_not_before() -> None:
    """moe_forward with combine weighting is the weighted combine of unweighted terms; its
    bits differ from late weighting (bf16 of h2 times the score is a second rounding) and the
    hand-worked known answer (powers of two) holds."""
    config, weights, hidden, ids, scores = random_case("bf16", 24, 5, combine_weighting=True)
    out = moe_forward(hidden, ids, scores, weights, config)
    s_ids, s_scores = stage_routes(ids, scores, hidden.shape[0])
    terms = expert_terms(hidden, s_ids, s_scores, weights, config)
    unweighted = MoEConfig("bf16", config.num_experts, config.top_k, config.hidden_size,
                           config.intermediate_size, late_weighting=True)
    assert torch.equal(out.view(torch.int16),
                       masked_combine(terms, s_ids, s_scores).view(torch.int16))
    late = moe_forward(hidden, ids, scores, weights, unweighted)
    assert not torch.equal(out.view(torch.int16), late.view(torch.int16))
    assert known_answer_failures(moe_forward, _known_config("bf16", combine_weighting=True)) == []


@pytest.mark.contract("s12.combine-weighting", "s7.collective-reference")
def test_the_collective_reference_weights_in_the_combine_too() -> None:
    config, weights, hidden, ids, scores = random_case("mxfp8", 16, 6, combine_weighting=True)
    want = moe_forward(hidden, ids, scores, weights, config)
    parts = [(hidden[:9], ids[:9], scores[:9]), (hidden[9:], ids[9:], scores[9:])]
    got = ep_forward(parts, weights, config, 2, capacity=9)
    assert torch.equal(torch.cat(got).view(torch.int16), want.view(torch.int16))


def test_weighting_in_two_places_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^combine_weighting: expected False when late"):
        MoEConfig("bf16", 4, 2, 64, 32, late_weighting=True, combine_weighting=True)
    with pytest.raises(ValueError, match=r"^combine_weighting: expected a bool"):
        MoEConfig("bf16", 4, 2, 64, 32, combine_weighting=1)  # type: ignore[arg-type]
    terms, ids, scores = _terms_case(0)
    with pytest.raises(ValueError, match=r"^scores: expected None or float32"):
        masked_combine(terms, ids, scores.double())
