"""``oracle.check_kernel`` judges a user's kernel (docs/contract.md s2, s6, s8, s10): a
correct PyTorch kernel passes at one rank and at two; each of three planted bugs is caught,
two of which a plain comparison of outputs misses: a masked NaN that leaks through
``0 * NaN``, an id of -1 that wraps to the last expert (invisible while masked scores are
zero), and per-slot bf16 rounding in the combine (inside the s8 tolerance)."""

from __future__ import annotations

import math

import pytest
import torch

from oracle.check_kernel import check_kernel
from oracle.compare import compare_rows
from oracle.experts import moe_forward
from oracle.moe_config import MoEConfig
from oracle.weights import prepare_weights

E, K, H, INTER, C = 8, 4, 64, 32, 12
CFG = MoEConfig("bf16", E, K, H, INTER)
STATES = ("dense-129", "all-masked", "sparse-holes", "asymmetric", "skewed", "empty-rank")


def _weights() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    w13 = (torch.randn(E, 2 * INTER, H, generator=g) / math.sqrt(H)).bfloat16()
    w2 = (torch.randn(E, H, INTER, generator=g) / math.sqrt(INTER)).bfloat16()
    return w13, w2


W13, W2 = _weights()
WEIGHTS = prepare_weights(W13, W2, CFG)


def user_moe(hidden: torch.Tensor, ids: torch.Tensor, scores: torch.Tensor,
             bug: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """A user's bf16 MoE in plain PyTorch, as a kernel author might write it: every slot's
    term (float32 GEMMs, SwiGLU, early weighting, bf16 A2, one bf16 rounding per slot) and a
    float32 combine in slot order. ``bug`` plants one of the three bugs."""
    t, k = ids.shape
    masked = ids == -1
    e = ids.long() if bug == "wrap" else ids.long().clamp_min(0)  # -1 -> expert E-1 (wrap)
    w = scores.float()
    if bug not in ("nan-leak", "wrap"):
        w = torch.where(masked, 0.0, w)
    x = hidden.float()
    h1 = torch.einsum("th,tkih->tki", x, W13.float()[e])
    gate, up = h1[..., :INTER], h1[..., INTER:]
    act = up * gate * torch.sigmoid(gate) * w.unsqueeze(-1)
    h2 = torch.einsum("tki,tkhi->tkh", act.bfloat16().float(), W2.float()[e])
    terms = h2.bfloat16()
    keep = (~masked).unsqueeze(-1)
    if bug == "nan-leak":  # zero the masked slots by multiplying: 0 * NaN stays NaN
        contrib = terms.float() * keep.float()
    elif bug == "wrap":  # every slot is summed: the wrapped slot counts with its score
        contrib = terms.float()
    else:
        contrib = torch.where(keep, terms.float(), 0.0)
    if bug == "bf16-accumulate":
        acc = torch.zeros(t, H, dtype=torch.bfloat16)
        for j in range(k):
            acc = (acc.float() + contrib[:, j]).bfloat16()
        return acc, terms
    acc = torch.zeros(t, H)
    for j in range(k):
        acc = acc + contrib[:, j]
    return acc.bfloat16(), terms


def _ranks(kernel=user_moe):  # type: ignore[no-untyped-def]
    """The same kernel over every rank's inputs (a world of P ranks in one process)."""
    return lambda inputs: [kernel(*x) for x in inputs]


def test_a_correct_kernel_passes_every_check_at_one_and_two_ranks() -> None:
    for world, kernel in ((1, user_moe), (2, _ranks())):
        report = check_kernel(kernel, WEIGHTS, CFG, capacity=C, world_size=world,
                              states=STATES)
        assert report.ok, report
        assert len(report.checked) >= len(STATES) * 5


def test_a_masked_nan_leaking_through_zero_times_nan_is_caught() -> None:
    report = check_kernel(lambda *a: user_moe(*a, bug="nan-leak"), WEIGHTS, CFG,
                          capacity=C, states=STATES)
    assert not report.ok
    assert any(f.rule == "s8.row-tolerance" and "not finite" in f.detail
               for f in report.failures), report


@pytest.mark.contract("s8.invariance")
def test_an_id_of_minus_one_wrapping_to_the_last_expert_is_caught() -> None:
    # a plain comparison with zero scores behind the masked slots cannot see it ...
    g = torch.Generator().manual_seed(9)
    x = torch.randn(6, H, generator=g).bfloat16()
    ids = torch.tensor([[0, -1, 2, 4], [3, 5, 1, 0], [-1, 2, -1, 6], [7, 1, 0, -1],
                        [-1, -1, -1, -1], [4, 6, 5, 3]])
    w = torch.where(ids == -1, 0.0, torch.rand(6, K, generator=g) * 0.9 + 0.05)
    out, _ = user_moe(x, ids, w, bug="wrap")
    assert compare_rows(out, moe_forward(x, ids, w, WEIGHTS, CFG), ids, "bf16").problems == ()
    # ... check_kernel's masked contents do
    report = check_kernel(lambda *a: user_moe(*a, bug="wrap"), WEIGHTS, CFG, capacity=C,
                          states=STATES, masked_contents=(0.0, "router"))
    assert any(f.rule == "s8.invariance" and "router" in f.detail for f in report.failures), (
        report)


@pytest.mark.contract("s6.combine-slot-order")
def test_per_slot_bf16_rounding_in_the_combine_is_caught_through_the_terms() -> None:
    bug = lambda *a: user_moe(*a, bug="bf16-accumulate")  # noqa: E731
    report = check_kernel(bug, WEIGHTS, CFG, capacity=C, states=STATES)
    assert {f.rule for f in report.failures} == {"s6.combine-slot-order"}, report
    # inside the tolerance: the rows alone pass
    x, ids, w = (torch.randn(5, H).bfloat16(), torch.tensor([[0, 1, 2, 3]] * 5),
                 torch.full((5, K), 0.5))
    out, _ = bug(x, ids, w)
    assert compare_rows(out, moe_forward(x, ids, w, WEIGHTS, CFG), ids, "bf16").problems == ()


@pytest.mark.contract("s8.row-tolerance")
def test_a_failing_row_names_its_rank_row_slot_and_expert() -> None:
    def off_by_expert_three(hidden, ids, scores):  # type: ignore[no-untyped-def]
        _, terms = user_moe(hidden, ids, scores)
        bad = (ids == 3).unsqueeze(-1)
        terms = torch.where(bad, (terms.float() * 1.5).bfloat16(), terms)
        acc = torch.where(ids.unsqueeze(-1) == -1, 0.0, terms.float()).sum(1)
        return acc.bfloat16(), terms

    report = check_kernel(_ranks(off_by_expert_three), WEIGHTS, CFG, capacity=C,
                          world_size=2, states=("dense-129",), masked_contents=())
    slots = [f for f in report.failures if f.slot is not None]
    assert slots and all(f.expert == 3 for f in slots)
    assert {f.rank for f in slots} == {0, 1} and all(f.row is not None for f in slots)


@pytest.mark.parametrize(("args", "name"), [
    (dict(kernel=1), "kernel"), (dict(weights=W13), "weights"), (dict(config="bf16"), "config"),
])
def test_bad_arguments_are_named(args: dict, name: str) -> None:
    kw = dict(kernel=user_moe, weights=WEIGHTS, config=CFG)
    kw.update(args)
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        check_kernel(kw["kernel"], kw["weights"], kw["config"], capacity=C)
