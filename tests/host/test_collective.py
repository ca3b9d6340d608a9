"""The collective EP reference (docs/contract.md s7, s8): ``oracle.collective.ep_forward``.

Its outputs must not depend on the world size (bitwise), must equal each rank's masked
combine of its expert terms, and must come out of the dispatch-layout bookkeeping: a
planted layout bug must break them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import oracle.collective as collective_mod
from fixtures.scenarios import SCENARIO_NAMES, make_scenario
from oracle.collective import ep_forward
from oracle.combine import masked_combine
from oracle.experts import expert_terms, moe_forward, prequantized_a1
from oracle.formats import quantize_mxfp8
from oracle.recipes import CONTRACT_RECIPES
from oracle.routing import dispatch_layout, stage_routes
from tests.bitwise import as_bytes, same_bits
from tests.host.test_experts import H, random_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _split(hidden, ids, scores, sizes):
    """Consecutive row groups of the given sizes: one rank each."""
    out, start = [], 0
    for n in sizes:
        out.append((hidden[start : start + n], ids[start : start + n], scores[start : start + n]))
        start += n
    assert start == hidden.shape[0]
    return out


SPLITS = {1: [23], 2: [0, 23], 4: [5, 1, 17, 0], 8: [3, 3, 0, 4, 1, 2, 6, 4]}


def world_size_failures(recipe: str) -> list[str]:
    """Run worlds of 1, 2, 4 and 8 ranks over the same 23 tokens; list every rank whose
    output differs from the single-rank forward on its rows."""
    config, weights, hidden, ids, scores = random_case(recipe, 23, seed=30)
    single = moe_forward(hidden, ids, scores, weights, config)
    failures = []
    for p, sizes in SPLITS.items():
        outs = ep_forward(_split(hidden, ids, scores, sizes), weights, config, p)
        start = 0
        for r, (n, out) in enumerate(zip(sizes, outs, strict=True)):
            if not same_bits(out, single[start : start + n]):
                failures.append(f"P={p} rank {r}")
            start += n
    return failures


@pytest.mark.contract("s7.collective-reference", "s8.invariance")
@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_world_sizes_1_2_4_8_give_identical_bits(recipe):
    assert world_size_failures(recipe) == []


@pytest.mark.contract("s7.collective-reference")
@pytest.mark.parametrize("recipe", CONTRACT_RECIPES)
def test_ep_forward_is_each_ranks_masked_combine_of_expert_terms(recipe):
    config, weights, hidden, ids, scores = random_case(recipe, 14, seed=31)
    ranks = _split(hidden, ids, scores, [6, 0, 8, 0])
    outs = ep_forward(ranks, weights, config, 4)
    for (h, i, s), out in zip(ranks, outs, strict=True):
        s_ids, s_scores = stage_routes(i, s, max(1, h.shape[0]))
        t = h.shape[0]
        terms = expert_terms(h, s_ids[:t], s_scores[:t], weights, config)
        assert same_bits(out, masked_combine(terms, s_ids[:t]))


@pytest.mark.contract("s6.inactive-rows-zero", "s7.collective-reference")
@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_scenarios_match_single_rank_forward_on_every_live_row(name):
    """Capacity-shaped scenario inputs (NaN garbage rows, NaN/Inf behind masked slots) go in
    as RankInputs; every live row of every rank equals moe_forward on that rank's rows."""
    config, weights, *_ = random_case("mxfp8", 1, seed=32, experts=8, top_k=3)
    state = make_scenario(
        name, world_size=4, capacity=12, top_k=3, num_experts=8, hidden_size=H, seed=5
    )
    outs = ep_forward(state.ranks, weights, config, 4, capacity=12)
    for rank, out in zip(state.ranks, outs, strict=True):
        assert same_bits(out, moe_forward(*rank.live(), weights, config))
        no_active = (rank.live()[1] == -1).all(dim=1)
        assert bool((as_bytes(out[no_active]) == 0).all())


def test_masked_slot_scores_nan_inf_or_zero_give_identical_bits():
    config, weights, hidden, ids, scores = random_case("nvfp4", 16, seed=33)
    zeroed = torch.where(ids == -1, torch.zeros_like(scores), scores)
    a = ep_forward(_split(hidden, ids, scores, [4, 4, 8, 0]), weights, config, 4)
    b = ep_forward(_split(hidden, ids, zeroed, [4, 4, 8, 0]), weights, config, 4)
    assert all(same_bits(x, y) for x, y in zip(a, b, strict=True))


def test_larger_capacity_changes_nothing():
    config, weights, hidden, ids, scores = random_case("fp8_mxfp4", 10, seed=34)
    ranks = _split(hidden, ids, scores, [4, 6])
    a = ep_forward(ranks, weights, config, 2)
    b = ep_forward(ranks, weights, config, 2, capacity=33)
    assert all(same_bits(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.contract("s3.no-stray-writes")
def test_inputs_are_never_written():
    config, weights, hidden, ids, scores = random_case("bf16", 10, seed=35)
    copies = [t.clone() for t in (hidden, ids, scores)]
    ep_forward(_split(hidden, ids, scores, [5, 5]), weights, config, 2)
    assert all(same_bits(t, c) for t, c in zip((hidden, ids, scores), copies, strict=True))


def test_experts_not_divisible_by_world_size_is_rejected():
    config, weights, hidden, ids, scores = random_case("bf16", 6, seed=36)  # E = 8
    with pytest.raises(ValueError, match=r"world_size.*num_experts=8.*got 3"):
        ep_forward(_split(hidden, ids, scores, [2, 2, 2]), weights, config, 3)


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda ranks: ranks[:1], r"per_rank_inputs: expected 2 entries"),
        (lambda ranks: [ranks[0], ranks[1][:2]], r"per_rank_inputs\[1\]"),
        (
            lambda ranks: [ranks[0], (ranks[1][0].float(), *ranks[1][1:])],
            r"per_rank_inputs\[1\]\.hidden",
        ),
        (
            lambda ranks: [ranks[0], (ranks[1][0], ranks[1][1][:, :2], ranks[1][2])],
            r"per_rank_inputs\[1\]\.topk_ids",
        ),
        (
            lambda ranks: [ranks[0], (ranks[1][0], ranks[1][1] + 100, ranks[1][2])],
            r"per_rank_inputs\[1\]\..*id_out_of_range",
        ),
    ],
)
def test_bad_input_raises_value_error_naming_the_rank(mutate, pattern):
    config, weights, hidden, ids, scores = random_case("bf16", 6, seed=37)
    ranks = _split(hidden, ids, scores, [3, 3])
    with pytest.raises(ValueError, match=pattern):
        ep_forward(mutate(ranks), weights, config, 2)


def test_bad_capacity_is_rejected():
    config, weights, hidden, ids, scores = random_case("bf16", 6, seed=38)
    with pytest.raises(ValueError, match="capacity"):
        ep_forward(_split(hidden, ids, scores, [2, 4]), weights, config, 2, capacity=3)


# ----------------------------------------------------------------------------- planted bugs


def test_planted_bug_layout_order_not_sorted_by_expert_breaks_world_size_check(monkeypatch):
    """A layout whose order stays in (src_rank, row, slot) order, not sorted by expert,
    hands rows to the wrong experts: the world-size check must fail."""

    def unsorted_layout(staged, num_experts, world_size):
        layout = dispatch_layout(staged, num_experts, world_size)
        keys = (layout.order[:, 0] * 10**6 + layout.order[:, 1]) * 64 + layout.order[:, 2]
        return dataclasses.replace(layout, order=layout.order[torch.argsort(keys)])

    monkeypatch.setattr(collective_mod, "dispatch_layout", unsorted_layout)
    assert world_size_failures("bf16") != []


def test_planted_bug_layout_counting_masked_slots_is_caught(monkeypatch):
    """A layout whose offsets also count masked slots disagrees with its own rank counts or
    misplaces rows: ep_forward must not return plausible output silently."""

    def counts_masked(staged, num_experts, world_size):
        layout = dispatch_layout(staged, num_experts, world_size)
        extra = sum(int((s == -1).sum()) for s in staged)
        offsets = layout.expert_offsets.clone()
        offsets[1:] += extra  # every masked slot counted as if routed to expert 0
        return dataclasses.replace(layout, expert_offsets=offsets)

    monkeypatch.setattr(collective_mod, "dispatch_layout", counts_masked)
    with pytest.raises((RuntimeError, AssertionError)):
        assert world_size_failures("bf16") == []


@pytest.mark.contract("s1.hidden-formats")
def test_prequantized_hidden_ranks_match_bf16_hidden_ranks():
    config, weights, hidden, ids, scores = random_case("mxfp8", 12, seed=39)
    payload, scale = quantize_mxfp8(hidden)
    a1 = prequantized_a1(payload, scale, config)
    pre = [
        (a1.rows(torch.arange(a, b)), ids[a:b], scores[a:b])
        for a, b in ((0, 5), (5, 5), (5, 12), (12, 12))
    ]
    got = ep_forward(pre, weights, config, 4)
    want = ep_forward(_split(hidden, ids, scores, [5, 0, 7, 0]), weights, config, 4)
    assert all(same_bits(x, y) for x, y in zip(got, want, strict=True))


def test_docs_oracle_example_runs():
    """The runnable example of docs/oracle.md stays runnable, and what it shows holds: its
    stand-in kernel meets the tolerance and its EP world equals the single rank bitwise (the
    example asserts both itself; read back here so that an edit dropping them fails)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "oracle.md").read_text()
    start = doc.index("```python\n") + len("```python\n")
    code = doc[start : doc.index("```", start)]
    ns: dict = {"__name__": "docs_oracle_example"}
    exec(compile(code, "docs/oracle.md", "exec"), ns)
    assert 0 < ns["worst"] <= ns["tol"]
    assert same_bits(torch.cat(ns["outs"]), ns["reference"])
