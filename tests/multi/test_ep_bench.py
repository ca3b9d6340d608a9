"""The EP benchmarks' arms in the tier's world, at the tier's shape: ``ep_layer``'s EP arm
(issue 37 item 7) gives the EP1 arm's rows bit for bit; ``ep_layer_torch``'s stock-PyTorch EP
baseline (issue 38) meets EP1 within docs/contract.md s8 on every live row; each arm's
pre-timing check passes, and fails when the arm and its reference read different weights (a
planted bug), on every rank."""

from __future__ import annotations

import pytest

from megamoe.bench.benchmarks import ep_layer as eb
from megamoe.bench.benchmarks import layer as lb
from megamoe.bench.registry import BuildContext, Case
from tests.multi.ep_world import Verdict, check_failure, shape_of


@pytest.fixture
def tiny_case(bench_tier):  # type: ignore[no-untyped-def]
    """A case of the tier's shape, named so that the benchmark's builders find it."""
    s = shape_of(bench_tier)
    return Case("tier-uniform-T12", {"tokens": 12, "hidden": s.hidden, "inter": s.inter,
                                     "experts": s.experts, "top_k": s.top_k},
                scenario="uniform", seed=17)


def _ctx(world) -> BuildContext:  # type: ignore[no-untyped-def]
    return BuildContext(world.device, world.rank, world.size, seed=17)


def test_the_ep_arm_gives_the_ep1_arms_rows(world, tiny_case) -> None:  # type: ignore[no-untyped-def]
    verdict = Verdict()
    ep = eb.EP_LAYER.candidate.build(tiny_case, _ctx(world))
    ep1 = eb.EP_LAYER.baselines[0].build(tiny_case, _ctx(world))
    why = check_failure(ep)
    verdict.check(world.rank, f"the EP arm's check failed: {why}", why is None)
    got = ep.fn().clone()
    want = ep1.fn()
    verdict.equal_bits(world.rank, "EP arm vs EP1 arm", got, want)
    verdict.check(world.rank, "no live row", got.shape[0] == 12)
    verdict.assert_clean(world)


def test_the_stock_pytorch_ep_arm_meets_ep1_within_the_row_bound(world, tiny_case) -> None:  # type: ignore[no-untyped-def]
    verdict = Verdict()
    torch_ep = eb.EP_LAYER_TORCH.baselines[0].build(tiny_case, _ctx(world))
    ep1 = eb.EP_LAYER.baselines[0].build(tiny_case, _ctx(world))
    why = check_failure(torch_ep)
    verdict.check(world.rank, f"the stock-PyTorch arm's check failed: {why}", why is None)
    got = torch_ep.fn()
    _, ids, _ = eb._inputs(tiny_case, _ctx(world))
    verdict.judge(world.rank, "stock-PyTorch EP vs EP1", got, ep1.fn(), ids, "bf16")
    verdict.check(world.rank, "no live row", got.shape[0] == 12)
    verdict.assert_clean(world)


@pytest.mark.parametrize("arm", ["ep-layer", "torch-ep-layer"])
def test_each_arms_check_catches_an_arm_that_reads_other_weights(
        world, tiny_case, monkeypatch, arm) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: each call of the weights gives new ones, so the arm's layer and the EP1
    reference of its check hold different experts."""
    real = lb._weights
    calls = []

    def drifting(shape, device):  # type: ignore[no-untyped-def]
        calls.append(1)
        w13, w2 = real(shape, device)
        return w13 * (1 + len(calls) / 8), w2

    monkeypatch.setattr(eb, "_weights", drifting)
    build = {"ep-layer": eb.EP_LAYER.candidate,
             "torch-ep-layer": eb.EP_LAYER_TORCH.baselines[0]}[arm].build
    work = build(tiny_case, _ctx(world))
    verdict = Verdict()
    verdict.check(world.rank, "the check passed arms with different weights",
                  check_failure(work) is not None)
    verdict.assert_clean(world)
