"""The EP benchmarks' declarations (issue 38 item 3) and the work a ceiling divides:
``ep_layer`` and ``ep_layer_torch`` cover both shapes from 1 to 4096 tokens per rank;
``ep_dispatch`` and ``ep_combine`` compare our pushes with an all-to-all of the same bytes
against the ``peer_copy_bw`` ceiling, whose rate counts bytes sent. Their arms run in the
multi tier (``tests/multi/test_ep_bench.py``, ``tests/multi/test_ep_exchange_bench.py``)."""

from __future__ import annotations

import statistics

import pytest

from megamoe.bench.benchmarks import ep_exchange as ee
from megamoe.bench.benchmarks import ep_layer as el
from megamoe.bench.device import HostBackend
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import SingleRank
from megamoe.bench.registry import (
    CEILING_NAMES,
    CEILING_WORK,
    DEVICE_CEILINGS,
    Arm,
    Benchmark,
    Case,
    Workload,
    load_benchmarks,
)
from megamoe.bench.runner import run_benchmark


def test_every_ceiling_names_the_work_its_rate_divides() -> None:
    assert set(CEILING_WORK) == set(CEILING_NAMES)
    w = Workload(lambda: None, bytes_moved=5, bytes_sent=7, flops=11, ceiling="peer_copy_bw")
    assert w.work() == 7
    assert Workload(lambda: None, bytes_moved=5, bytes_sent=7, ceiling="copy_bw").work() == 5
    assert Workload(lambda: None, flops=11, ceiling="bf16_mm").work() == 11
    assert Workload(lambda: None, flops=11).work() == 0


def test_a_benchmark_measures_the_device_ceilings_unless_it_names_others() -> None:
    b = Benchmark("b", "d", (Case("a"),), Arm("x", lambda c, ctx: Workload(lambda: None)))
    assert b.ceilings == DEVICE_CEILINGS and "peer_copy_bw" not in b.ceilings


def test_the_exchange_benchmarks_compare_pushes_with_an_all_to_all_against_the_peer_copy() -> None:
    benches = load_benchmarks()
    for name, arms in (("ep_dispatch", ("push-dispatch", "all-to-all-dispatch")),
                       ("ep_combine", ("push-return", "all-to-all-return"))):
        b = benches[name]
        assert (b.candidate.name, *(x.name for x in b.baselines)) == arms
        assert b.ceilings == ("peer_copy_bw",) and b.graph
    recipes = {ee.case_recipe(c) for c in ee.EP_DISPATCH.cases}
    assert recipes == {"bf16", "mxfp8"}
    assert {ee.case_recipe(c) for c in ee.EP_COMBINE.cases} == {"bf16"}
    quick = ee.EP_DISPATCH.cases_for(quick=True)
    assert quick and all(c.shape["tokens"] == 128 for c in quick)
    tokens = {c.shape["tokens"] for c in ee.EP_DISPATCH.cases}
    assert tokens == {128, 1024, 4096}
    assert {c.scenario for c in ee.EP_DISPATCH.cases} == {"uniform", "skewed"}


def test_the_ep_layer_benchmarks_cover_both_shapes_from_one_to_4096_tokens() -> None:
    for bench in (el.EP_LAYER, el.EP_LAYER_TORCH):
        grid = {(c.name.split("-")[0], c.scenario, c.shape["tokens"]) for c in bench.cases}
        assert grid == {(s, r, t) for s in ("gptoss", "deepseek") for r in ("uniform", "skewed")
                        for t in (1, 16, 256, 4096)}
        # an emulated world holds P EP1 copies of every expert on one GPU: quick is small
        assert [c.name for c in bench.cases_for(quick=True)] == ["gptoss-uniform-T16",
                                                                 "gptoss-skewed-T16"]


def test_a_case_without_a_known_recipe_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="recipe"):
        ee.case_recipe(Case("deepseek-nvfp4-uniform-T128"))


def test_achieved_bytes_per_second_of_an_exchange_arm_divide_bytes_sent() -> None:
    """A run on the CPU with a stand-in peer ceiling: the arm's achieved rate is its bytes
    sent (not its bytes moved) over its median time."""
    import torch

    src = torch.ones(1 << 16)
    dst = torch.empty_like(src)

    def arm(case: Case, ctx) -> Workload:  # type: ignore[no-untyped-def]
        return Workload(lambda: dst.copy_(src), bytes_moved=1, bytes_sent=src.nbytes,
                        ceiling="peer_copy_bw")

    def ceiling(sizes, ctx) -> Workload:  # type: ignore[no-untyped-def]
        return Workload(lambda: dst.copy_(src), bytes_sent=src.nbytes, ceiling="peer_copy_bw")

    bench = Benchmark("test-exchange-work", "d", (Case("a"),), Arm("push", arm),
                      ceilings=("peer_copy_bw",))
    proto = Protocol(rounds=1, pairs=2, warmup=1, calls_per_sample=1, graph=False,
                     caches=("warm",))
    rec = run_benchmark(bench, HostBackend(), SingleRank(), proto,
                        ceiling_builders={"peer_copy_bw": ceiling})
    (got,) = rec["cases"][0]["achieved"]
    samples = [s for r in rec["cases"][0]["comparisons"][0]["rounds"] for side in (0, 1)
               for s in r["samples_s"][side]]
    median = statistics.median(samples)
    assert got["arm"] == "push" and got["unit"] == "B/s"
    assert got["value"] == pytest.approx(src.nbytes / median)
    assert got["ceiling_value"] == rec["ceilings"][0]["value"] > 0


class _TurnWorld:
    """One rank of a world of ``size``: records its barriers (the other ranks are not here,
    so a barrier returns at once; what is checked is this rank's order of work)."""

    def __init__(self, rank: int, size: int, events: list[str]) -> None:
        self.rank, self.size, self.events = rank, size, events

    def barrier(self, step: str = "barrier") -> None:
        self.events.append("barrier")


class _RefLayer:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        events.append("build")

    def warmup(self, x, ids, w):  # type: ignore[no-untyped-def]
        return x

    def destroy(self) -> None:
        self.events.append("destroy")


def _reference_order(monkeypatch, rank: int, size: int, ep1_output) -> list[str]:  # type: ignore[no-untyped-def]
    """The events of rank ``rank`` while ``ep1_output`` computes its EP1 reference."""
    import torch

    events: list[str] = []
    monkeypatch.setattr(el, "current_world", lambda: _TurnWorld(rank, size, events))
    monkeypatch.setattr(el, "_layer", lambda case, ctx, ep: _RefLayer(events))
    monkeypatch.setattr(el, "_release_cached", lambda device: events.append("release"))
    x = torch.ones(2, 4)
    ctx = type("Ctx", (), {"device": torch.device("cpu")})()
    assert ep1_output(Case("gptoss-uniform-T16"), ctx, x, None, None) is x
    return events


def _in_turn(rank: int, size: int) -> list[str]:
    """Rank ``rank``'s work in turn: ``rank`` barriers, its reference built, destroyed and its
    memory released, then the remaining barriers."""
    return ["barrier"] * rank + ["build", "destroy", "release"] + ["barrier"] * (size - rank)


@pytest.mark.parametrize("rank", [0, 2, 3])
def test_the_ep_arms_check_builds_its_ep1_reference_in_its_turn_and_hands_its_memory_back(
        monkeypatch, rank: int) -> None:  # type: ignore[no-untyped-def]
    """The ranks of an emulated world share one GPU, each holding the EP1 arm's layer: the
    check's reference layers (every expert) are built one rank at a time, rank r after r
    barriers, and freed back to the device before the next turn (H100: P = 4 at once ran
    out of memory)."""
    assert _reference_order(monkeypatch, rank, 4, el._ep1_output) == _in_turn(rank, 4)


def test_a_check_that_builds_every_ranks_reference_at_once_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The check above fails the way the benchmark was before (every rank at once)."""

    def at_once(case, ctx, x, ids, w):  # type: ignore[no-untyped-def]
        ref = el._layer(case, ctx, ep=False)
        want = ref.warmup(x, ids, w)
        ref.destroy()
        return want

    events = _reference_order(monkeypatch, 2, 4, at_once)
    assert events == ["build", "destroy"]  # before ranks 0 and 1 are done, never handed back
    assert events != _in_turn(2, 4)
