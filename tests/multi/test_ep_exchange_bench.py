"""The exchange benchmarks' arms in the tier's world, at the tier's shape (issue 38 item 3):
``ep_dispatch`` and ``ep_combine``, our pushes and the all-to-all baselines, each pass their
pre-timing check (every received row, bit for bit, against the oracle's order) on every
rank and declare the same bytes; each check fails on a planted misdelivery; the
``peer_copy_bw`` ceiling writes each rank's chunk into every rank's buffer."""

from __future__ import annotations

import pytest
import torch

from megamoe.bench import ceilings
from megamoe.bench.benchmarks import ep_exchange as ee
from megamoe.bench.registry import BuildContext, Case
from megamoe.layer.ep_exchange import EpExchange
from tests.multi.ep_world import Verdict, check_failure, shape_of

ARMS = {
    "push-dispatch": ee.EP_DISPATCH.candidate,
    "all-to-all-dispatch": ee.EP_DISPATCH.baselines[0],
    "push-return": ee.EP_COMBINE.candidate,
    "all-to-all-return": ee.EP_COMBINE.baselines[0],
}
PAIRS = (("push-dispatch", "all-to-all-dispatch"), ("push-return", "all-to-all-return"))


def _case(world, recipe: str, routes: str = "uniform") -> Case:  # type: ignore[no-untyped-def]
    """Uniform routes give every rank rows to send and to receive at P = 2 and 4."""
    s = shape_of(world)
    return Case(f"tier-{recipe}-{routes}-T12", {"tokens": 12, "hidden": s.hidden,
                                                "inter": s.inter, "experts": s.experts,
                                                "top_k": s.top_k}, scenario=routes, seed=29)


@pytest.fixture
def tier(bench_tier):  # type: ignore[no-untyped-def]
    return bench_tier


def _ctx(world) -> BuildContext:  # type: ignore[no-untyped-def]
    return BuildContext(world.device, world.rank, world.size, seed=29)


def _caught(work) -> bool:  # type: ignore[no-untyped-def]
    return check_failure(work) is not None


@pytest.mark.parametrize("routes", ["uniform", "skewed"])
@pytest.mark.parametrize("recipe", ["bf16", "mxfp8"])
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p[0])
def test_each_exchange_arm_delivers_the_oracles_rows_and_declares_the_same_bytes(
        tier, recipe, pair, routes) -> None:  # type: ignore[no-untyped-def]
    verdict = Verdict()
    case = _case(tier, recipe, routes)
    works = [ARMS[name].build(case, _ctx(tier)) for name in pair]
    for name, work in zip(pair, works, strict=True):
        verdict.check(tier.rank, f"{name}: its check failed", not _caught(work))
        verdict.check(tier.rank, f"{name}: no bytes declared", work.bytes_sent > 0)
    verdict.check(tier.rank, f"{pair}: the arms declare {works[0].bytes_sent} and "
                  f"{works[1].bytes_sent} bytes", works[0].bytes_sent == works[1].bytes_sent)
    verdict.assert_clean(tier)


def _rows_one_off(ex: EpExchange) -> None:
    """Every route's receive row one past its place (mod the buffer)."""
    ex.send_dst.add_(1).remainder_(ex.recv_rows)


def _terms_rolled(ex: EpExchange) -> None:
    """Each received route's term to the slot (and rank) of the route before it."""
    ex.ret_dst.copy_(torch.roll(ex.ret_dst, 1))
    ex.ret_dest.copy_(torch.roll(ex.ret_dest, 1))


PLANTED = {"push-dispatch": ("send_tables", _rows_one_off),
           "push-return": ("recv_tables", _terms_rolled)}
"""Per push arm: the exchange step whose tables a planted bug corrupts, and the bug."""


@pytest.mark.parametrize("arm", sorted(PLANTED))
def test_each_push_check_catches_a_planted_misdelivery(tier, monkeypatch, arm) -> None:  # type: ignore[no-untyped-def]
    step, plant = PLANTED[arm]
    real = getattr(EpExchange, step)

    def planted(self):  # type: ignore[no-untyped-def]
        path = real(self)
        plant(self)
        return path

    monkeypatch.setattr(EpExchange, step, planted)
    work = ARMS[arm].build(_case(tier, "bf16"), _ctx(tier))
    verdict = Verdict()
    verdict.check(tier.rank, f"the check passed {plant.__doc__}", _caught(work))
    verdict.assert_clean(tier)


@pytest.mark.parametrize("arm", ["all-to-all-dispatch", "all-to-all-return"])
def test_the_all_to_all_check_catches_rows_out_of_order(tier, monkeypatch, arm) -> None:  # type: ignore[no-untyped-def]
    """Planted bug: the all-to-all delivers every rank's rows in reverse order."""
    real = ee.all_to_all
    monkeypatch.setattr(ee, "all_to_all", lambda *a: real(*a).flip(0))
    work = ARMS[arm].build(_case(tier, "bf16"), _ctx(tier))
    verdict = Verdict()
    verdict.check(tier.rank, "the check passed rows out of order", _caught(work))
    verdict.assert_clean(tier)


def test_the_peer_copy_ceiling_writes_each_ranks_chunk_into_every_rank(tier) -> None:  # type: ignore[no-untyped-def]
    sizes = ceilings.CeilingSizes(copy_bytes=4096 * tier.size, mm_size=0)
    work = ceilings.CEILING_BUILDERS["peer_copy_bw"](sizes, _ctx(tier))
    work.fn()
    if tier.device.type == "cuda":
        torch.cuda.synchronize(tier.device)
    tier.barrier()
    chunk = work.bytes_sent // tier.size
    buf = ceilings._PEER_BUFFERS[(id(tier), work.bytes_sent)]
    verdict = Verdict()
    verdict.check(tier.rank, f"declares {work.bytes_sent} bytes for {sizes.copy_bytes}",
                  work.bytes_sent == sizes.copy_bytes)
    for src in range(tier.size):
        g = BuildContext(tier.device, src, tier.size, seed=29).generator()
        theirs = torch.randint(0, 256, (work.bytes_sent,), generator=g, device=tier.device,
                               dtype=torch.uint8)
        mine = theirs[tier.rank * chunk : (tier.rank + 1) * chunk]
        got = buf.local[src * chunk : (src + 1) * chunk]  # type: ignore[attr-defined]
        verdict.check(tier.rank, f"rank {src}'s chunk for this rank did not arrive",
                      torch.equal(got, mine))
    verdict.assert_clean(tier)
