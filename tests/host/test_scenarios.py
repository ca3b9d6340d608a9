"""The scenario library produces what each name says (docs/contract.md s10, fixtures/scenarios.py)."""

from __future__ import annotations

import math

import pytest
import torch

from fixtures import (
    CHANGING_ROUTE_SEQUENCE,
    RESTORED_FROM,
    SCENARIO_NAMES,
    ScenarioState,
    asymmetric_tokens,
    make_scenario,
    make_sequence,
)
from oracle.routing import find_route_violations

# (P, C, K, E, H): small, capacity below 129, K = E, P = 8, a large C.
SHAPES = [
    (1, 3, 1, 1, 4),
    (2, 5, 2, 4, 8),
    (4, 200, 4, 16, 8),
    (8, 140, 8, 8, 4),
    (3, 130, 3, 6, 2),
]
SHAPE_IDS = [f"P{p}-C{c}-K{k}-E{e}-H{h}" for p, c, k, e, h in SHAPES]


def _make(name: str, shape, seed: int = 7) -> ScenarioState:
    p, c, k, e, h = shape
    return make_scenario(
        name, world_size=p, capacity=c, top_k=k, num_experts=e, hidden_size=h, seed=seed
    )


def _active(state: ScenarioState) -> list[torch.Tensor]:
    """Per rank, the [T, K] bool mask of active slots in the live rows."""
    return [r.live()[1] != -1 for r in state.ranks]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _check_common(state: ScenarioState, shape) -> None:
    """Shapes, dtypes, valid live routes, poisoned masked scores, NaN garbage rows."""
    p, c, k, e, h = shape
    assert state.world_size == p
    for r in state.ranks:
        assert r.hidden.shape == (c, h) and r.hidden.dtype == torch.bfloat16
        assert r.topk_ids.shape == (c, k) and r.topk_ids.dtype == torch.int64
        assert r.topk_weights.shape == (c, k) and r.topk_weights.dtype == torch.float32
        assert 0 <= r.num_tokens <= c
        hidden, ids, w = r.live()
        assert hidden.shape[0] == ids.shape[0] == w.shape[0] == r.num_tokens
        assert bool(torch.isfinite(hidden.float()).all())
        assert bool(torch.isnan(r.hidden[r.num_tokens :].float()).all())
        assert find_route_violations(ids, w, e) == []
        active = ids != -1
        assert bool((ids[active] >= 0).all()) and bool((ids[active] < e).all())
        assert bool((w[active] >= 0.05).all()) and bool((w[active] < 1.0).all())
        assert not bool(torch.isfinite(w[~active]).any()), "masked scores must be NaN/+-Inf"


@pytest.mark.contract("s10.scenario-library")
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_scenario_is_valid_and_capacity_shaped(name: str, shape) -> None:
    _check_common(_make(name, shape), shape)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_dense_129_has_rows_0_to_128_live_and_all_active(shape) -> None:
    s = _make("dense-129", shape)
    assert s.num_tokens == (min(129, shape[1]),) * shape[0]
    assert all(bool(a.all()) for a in _active(s))


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_dense_c_fills_capacity_all_active(shape) -> None:
    s = _make("dense-C", shape)
    assert s.num_tokens == (shape[1],) * shape[0]
    assert all(bool(a.all()) for a in _active(s))


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_all_masked_has_live_rows_without_active_slot(shape) -> None:
    s = _make("all-masked", shape)
    assert s.num_tokens == (shape[1],) * shape[0]
    assert not any(bool(a.any()) for a in _active(s))


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_last_capacity_row_only_has_exactly_row_c_minus_1_live(shape) -> None:
    s = _make("last-capacity-row-only", shape)
    c = shape[1]
    assert s.num_tokens == (c,) * shape[0]
    for a in _active(s):
        assert bool(a[c - 1].all())
        assert not bool(a[: c - 1].any())


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_sparse_holes_has_masked_slots_and_fully_masked_rows(shape) -> None:
    s = _make("sparse-holes", shape)
    c, k = shape[1], shape[2]
    assert s.num_tokens == (c,) * shape[0]
    for a in _active(s):
        if c >= 2:
            assert bool((~a.any(dim=1)).any()), "no fully masked row"
            assert bool(a.any()), "no active slot"
        if c >= 2 and k >= 2:
            holed = a.any(dim=1) & ~a.all(dim=1)
            assert bool(holed.any()), "no row mixing active and masked slots"


def test_sparse_holes_fractions_are_plausible() -> None:
    s = _make("sparse-holes", (2, 2000, 4, 8, 2))
    for a in _active(s):
        empty_rows = float((~a.any(dim=1)).float().mean())
        masked = float((~a).float().mean())
        # P(row empty) = 0.2 + 0.8 * 0.25**4 ~ 0.203; P(slot masked) = 0.2 + 0.8 * 0.25 = 0.4
        assert 0.17 < empty_rows < 0.24, empty_rows
        assert 0.36 < masked < 0.44, masked


@pytest.mark.contract("s10.scenario-library")
@pytest.mark.parametrize(
    ("p", "c", "want"),
    [
        (4, 300, (0, 1, 129, 300)),
        (8, 300, (0, 1, 129, 300, 0, 1, 129, 300)),
        (4, 100, (0, 1, 100, 100)),
        (1, 300, (1,)),
        (2, 300, (0, 300)),
        (3, 300, (0, 1, 300)),
        (5, 130, (0, 1, 129, 130, 0)),
    ],
)
def test_asymmetric_gives_0_1_129_and_c_live_rows(p: int, c: int, want) -> None:
    assert asymmetric_tokens(p, c) == want
    s = make_scenario(
        "asymmetric", world_size=p, capacity=c, top_k=2, num_experts=p * 2, hidden_size=2, seed=3
    )
    assert s.num_tokens == want
    assert all(bool(a.all()) for a in _active(s))


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_skewed_routes_everything_to_one_expert_once_per_row(shape) -> None:
    p, c, k, e, _ = shape
    s = _make("skewed", shape)
    assert s.num_tokens == (c,) * p
    experts = torch.cat([r.live()[1][r.live()[1] != -1] for r in s.ranks]).unique()
    assert experts.numel() == 1, experts
    assert 0 <= int(experts[0]) < e  # one expert, hence one owner rank
    for a in _active(s):
        assert torch.equal(a.sum(dim=1), torch.ones(c, dtype=torch.int64))
        assert torch.equal((~a).sum(dim=1), torch.full((c,), k - 1))


def test_skewed_expert_and_slot_vary_with_seed() -> None:
    shape = (4, 64, 4, 32, 2)
    hot = set()
    slots = set()
    for seed in range(6):
        s = _make("skewed", shape, seed)
        ids = s.ranks[0].live()[1]
        hot.add(int(ids[ids != -1][0]))
        slots.update((ids != -1).nonzero()[:, 1].tolist())
    assert len(hot) > 1 and slots == {0, 1, 2, 3}


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_empty_rank_has_exactly_one_rank_sending_nothing(shape) -> None:
    p, c, *_ = shape
    s = _make("empty-rank", shape)
    assert sorted(s.num_tokens) == [0] + [c] * (p - 1)
    assert all(bool(a.all()) for a in _active(s))


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_uniform_balances_experts_within_one(shape) -> None:
    p, c, k, e, _ = shape
    s = _make("uniform", shape)
    assert s.num_tokens == (c,) * p
    ids = torch.cat([r.live()[1].reshape(-1) for r in s.ranks])
    assert bool((ids >= 0).all())
    counts = torch.bincount(ids, minlength=e)
    assert int(counts.max() - counts.min()) <= 1
    assert int(counts.sum()) == p * c * k


@pytest.mark.contract("s10.scenario-library")
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_restored_is_byte_identical_to_the_first_state(shape) -> None:
    first = _make(CHANGING_ROUTE_SEQUENCE[0], shape)
    restored = _make("restored", shape)
    assert restored.name == "restored" and CHANGING_ROUTE_SEQUENCE[0] == RESTORED_FROM
    for a, b in zip(first.ranks, restored.ranks, strict=True):
        assert a.num_tokens == b.num_tokens
        for x, y in (
            (a.hidden, b.hidden),
            (a.topk_ids, b.topk_ids),
            (a.topk_weights, b.topk_weights),
        ):
            assert torch.equal(_bytes(x), _bytes(y))


@pytest.mark.contract("s10.scenario-library")
def test_sequence_covers_contract_states_and_ends_restored() -> None:
    contract_s10 = {
        "dense-129", "all-masked", "last-capacity-row-only", "sparse-holes",
        "asymmetric", "skewed", "empty-rank", "dense-C",
    }  # fmt: skip
    assert contract_s10 <= set(CHANGING_ROUTE_SEQUENCE)
    assert set(CHANGING_ROUTE_SEQUENCE) == set(SCENARIO_NAMES)
    assert len(set(SCENARIO_NAMES)) == len(SCENARIO_NAMES)
    assert CHANGING_ROUTE_SEQUENCE[0] == "dense-129" and CHANGING_ROUTE_SEQUENCE[-1] == "restored"
    seq = make_sequence(world_size=2, capacity=4, top_k=2, num_experts=4, hidden_size=2, seed=1)
    assert tuple(s.name for s in seq) == CHANGING_ROUTE_SEQUENCE


def test_same_seed_same_bytes_other_seed_other_routes() -> None:
    shape = (2, 50, 3, 8, 4)
    for name in SCENARIO_NAMES:
        a, b = _make(name, shape, 11), _make(name, shape, 11)
        for x, y in zip(a.ranks, b.ranks, strict=True):
            assert torch.equal(_bytes(x.hidden), _bytes(y.hidden))
            assert torch.equal(x.topk_ids, y.topk_ids)
            assert torch.equal(_bytes(x.topk_weights), _bytes(y.topk_weights))
    a, b = _make("dense-C", shape, 11), _make("dense-C", shape, 12)
    assert not torch.equal(a.ranks[0].topk_ids, b.ranks[0].topk_ids)
    assert not torch.equal(_bytes(a.ranks[0].hidden), _bytes(b.ranks[0].hidden))


def test_masked_scores_use_nan_and_both_infinities() -> None:
    s = _make("sparse-holes", (1, 200, 4, 8, 2))
    _, ids, w = s.ranks[0].live()
    masked = w[ids == -1]
    assert bool(torch.isnan(masked).any())
    assert bool((masked == math.inf).any()) and bool((masked == -math.inf).any())


def test_rows_beyond_t_hold_garbage_routes() -> None:
    s = _make("dense-129", (1, 400, 4, 8, 2))
    r = s.ranks[0]
    tail_ids = r.topk_ids[r.num_tokens :]
    tail_w = r.topk_weights[r.num_tokens :]
    assert bool(((tail_ids < -1) | (tail_ids >= 8)).any()), "no out-of-range garbage id"
    assert bool((tail_ids == 2**40).any()), "no id that int32 narrowing would wrap"
    assert bool(torch.isnan(tail_w).any()) and bool(torch.isinf(tail_w).any())
    assert find_route_violations(tail_ids, tail_w, 8) != []


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"name": "dense"}, r"name: expected one of"),
        ({"top_k": 9}, r"top_k: expected <= num_experts=8"),
        ({"world_size": 3}, r"num_experts: expected a multiple of world_size=3, got 8"),
        ({"capacity": 0}, r"capacity: expected an int >= 1, got 0"),
        ({"seed": 1.5}, r"seed: expected an int"),
    ],
)
def test_make_scenario_rejects_bad_arguments(kwargs, pattern) -> None:
    args = {
        "name": "dense-C",
        "world_size": 2,
        "capacity": 4,
        "top_k": 2,
        "num_experts": 8,
        "hidden_size": 2,
        "seed": 0,
    }
    args.update(kwargs)
    name = args.pop("name")
    with pytest.raises(ValueError, match=pattern):
        make_scenario(name, **args)
