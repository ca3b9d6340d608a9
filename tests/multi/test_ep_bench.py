"""The ``ep_layer`` benchmark's arms in the tier's world (issue 37 item 7), at the tier's shape:
the EP arm's timed call gives the EP1 arm's rows bit for bit, its pre-timing check passes,
and that check fails when the arms read different weights (a planted bug), on every rank."""

from __future__ import annotations

import pytest

from megamoe.bench import ep_world as bench_world
from megamoe.bench.benchmarks import ep_layer as eb
from megamoe.bench.benchmarks import layer as lb
from megamoe.bench.registry import BuildContext, Case
from tests.multi.ep_world import Verdict, shape_of


@pytest.fixture
def tiny_case(world, monkeypatch):  # type: ignore[no-untyped-def]
    """A case of the tier's shape, named so that the benchmark's builders find it, and the
    tier's world as the benchmark's."""
    s = shape_of(world)
    monkeypatch.setitem(lb.SHAPES, "tier", lb.Shape("tier", s.hidden, s.inter, s.experts,
                                                    s.top_k))
    monkeypatch.setattr(bench_world, "_WORLD", [world])
    lb._WEIGHTS.clear()
    yield Case("tier-uniform-T12", {"tokens": 12, "hidden": s.hidden, "inter": s.inter,
                                    "experts": s.experts, "top_k": s.top_k},
               scenario="uniform", seed=17)
    lb._WEIGHTS.clear()


def _ctx(world) -> BuildContext:  # type: ignore[no-untyped-def]
    return BuildContext(world.device, world.rank, world.size, seed=17)


def test_the_ep_arm_gives_the_ep1_arms_rows(world, tiny_case) -> None:  # type: ignore[no-untyped-def]
    verdict = Verdict()
    ep = eb.EP_LAYER.candidate.build(tiny_case, _ctx(world))
    ep1 = eb.EP_LAYER.baselines[0].build(tiny_case, _ctx(world))
    try:
        ep.check()
    except AssertionError as e:
        verdict.check(world.rank, f"the EP arm's check failed: {e}", False)
    got = ep.fn().clone()
    want = ep1.fn()
    verdict.equal_bits(world.rank, "EP arm vs EP1 arm", got, want)
    verdict.check(world.rank, "no live row", got.shape[0] == 12)
    verdict.assert_clean(world)


def test_the_ep_arms_check_catches_arms_that_read_different_weights(
        world, tiny_case, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: each call of the weights gives new ones, so the EP arm's layer and the
    EP1 reference of its check hold different experts."""
    real = lb._weights
    calls = []

    def drifting(shape, device):  # type: ignore[no-untyped-def]
        calls.append(1)
        w13, w2 = real(shape, device)
        return w13 * (1 + len(calls) / 8), w2

    monkeypatch.setattr(eb, "_weights", drifting)
    ep = eb.EP_LAYER.candidate.build(tiny_case, _ctx(world))
    caught = False
    try:
        ep.check()
    except AssertionError:
        caught = True
    verdict = Verdict()
    verdict.check(world.rank, "the check passed arms with different weights", caught)
    verdict.assert_clean(world)
