"""Multi-rank sampling: rank maximum, all ranks retained, barrier and gather outside the timing."""

from __future__ import annotations

from dataclasses import replace

import pytest

import megamoe.bench.runner as runner_mod
from megamoe.bench.fake import FakeDevice
from megamoe.bench.measure import Measurer
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import DistributedRanks, EmulatedRanks, SingleRank
from megamoe.bench.records import validate_record
from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case
from megamoe.bench.runner import run_benchmark

CASE = Case("c", {"n": 1})
PROTO = Protocol(rounds=2, pairs=4, warmup=1, calls_per_sample=2, caches=("warm",))


def _emulated_run(world: int) -> dict:
    dev = FakeDevice()
    bench = Benchmark(
        name="fake", description="fake", cases=(CASE,), ceilings=(),
        candidate=dev.arm("new", 1e-3, rank_scale=0.5),
        baselines=(dev.arm("old", 2e-3, rank_scale=0.5),),
    )
    return run_benchmark(bench, dev.backend, EmulatedRanks(world), PROTO)


def test_each_sample_is_the_maximum_over_emulated_ranks() -> None:
    rec = _emulated_run(4)
    (case,) = rec["cases"]
    for comp in case["comparisons"]:
        mean = {"new": 1e-3, "old": 2e-3}
        for r in comp["rounds"]:
            for side, name in enumerate((comp["a"], comp["b"])):
                per_rank = [mean[name] * (1 + 0.5 * k) for k in range(4)]
                for sample, values in zip(r["samples_s"][side], r["rank_samples_s"][side], strict=True):
                    assert values == pytest.approx(per_rank)
                    assert sample == pytest.approx(max(per_rank))
    assert rec["ranks"] == {"mode": "emulated", "world_size": 4}
    validate_record(rec)


def test_planted_bug_a_minimum_over_ranks_is_caught_by_the_record_check(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    class MinMeasurer(Measurer):
        def compare(self, units_a, units_b, cold):  # type: ignore[no-untyped-def]
            return [
                replace(r, samples=tuple(tuple(min(v) for v in side) for side in r.rank_samples))
                for r in super().compare(units_a, units_b, cold)
            ]

    monkeypatch.setattr(runner_mod, "Measurer", MinMeasurer)
    rec = _emulated_run(3)
    with pytest.raises(ValueError, match="rank maximum"):
        validate_record(rec)


def test_emulated_ranks_build_one_workload_per_logical_rank() -> None:
    seen: list[tuple[int, int]] = []
    dev = FakeDevice()
    inner = dev.arm("new", 1e-3)

    def build(case: Case, ctx: BuildContext):  # type: ignore[no-untyped-def]
        seen.append((ctx.rank, ctx.world_size))
        return inner.build(case, ctx)

    bench = Benchmark(name="fake", description="fake", cases=(CASE,), ceilings=(), candidate=Arm("new", build))
    run_benchmark(bench, dev.backend, EmulatedRanks(3), PROTO)
    assert seen == [(0, 3), (1, 3), (2, 3)] * 2  # A/A: two builds of every rank


def test_emulated_gather_rejects_a_missing_rank() -> None:
    with pytest.raises(ValueError, match="local_values"):
        EmulatedRanks(4).gather([1.0, 2.0])
    with pytest.raises(ValueError, match="world_size"):
        EmulatedRanks(0)


def test_emulated_barrier_runs_before_every_rank_of_every_sample() -> None:
    dev = FakeDevice()
    syncs = 0

    def sync() -> None:
        nonlocal syncs
        syncs += 1

    dev.backend.synchronize = sync  # type: ignore[method-assign]
    m = Measurer(dev.backend, EmulatedRanks(3), Protocol(rounds=1, pairs=2, warmup=0, calls_per_sample=1))
    units = m.prepare([dev.arm("a", 1e-3).build(CASE, BuildContext(dev.backend.device, r, 3, 0)) for r in range(3)])
    before = syncs
    m.compare(units, units, cold=False)
    assert syncs - before == 2 * 2 * 3  # pairs * arms * ranks


def test_single_rank_describes_itself() -> None:
    assert SingleRank().describe() == {"mode": "single", "world_size": 1}


def test_distributed_ranks_gather_and_barrier_in_a_one_process_world(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ranks = DistributedRanks()
        dev = FakeDevice()
        ranks.barrier(dev.backend)
        assert ranks.gather([0.25]) == [0.25]
        assert ranks.is_writer and ranks.local_ranks() == (0,)
        assert ranks.describe() == {"mode": "distributed", "world_size": 1, "rank": 0}
    finally:
        dist.destroy_process_group()


def test_distributed_ranks_need_an_initialised_world() -> None:
    with pytest.raises(ValueError, match="initialised"):
        DistributedRanks()
