"""A comparison's workloads are gone when the backend releases its cached memory
(``megamoe.bench.runner._compare``): the release returns memory to the device only for
buffers nobody holds, and a remote arm's worker, another process, allocates from the
device. On an H100 (2026-12-06) the release ran while an A/A control's two layers were
still held; the cache kept their 42 GiB and FlashInfer's worker ran out of memory at the
whole DeepSeek-like shape. Each check here failed on that order."""

from __future__ import annotations

import gc
import weakref

from megamoe.bench.device import HostBackend
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import SingleRank
from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload
from megamoe.bench.runner import run_benchmark

PROTO = Protocol(rounds=1, pairs=2, warmup=1, calls_per_sample=1, caches=("warm", "cold"))


class _Buffers:
    """What a built layer holds (its weights, its workspace)."""


class _ReleaseWatch(HostBackend):
    """A host backend that counts, at each release, the built buffers still alive."""

    def __init__(self) -> None:
        super().__init__()
        self.built: list[weakref.ref[_Buffers]] = []
        self.alive_at_release: list[int] = []

    def release(self) -> None:
        gc.collect()  # only references count, not garbage waiting for a cycle collection
        self.alive_at_release.append(sum(r() is not None for r in self.built))


def _arm(name: str, watch: _ReleaseWatch) -> Arm:
    def build(case: Case, ctx: BuildContext) -> Workload:
        held = _Buffers()
        watch.built.append(weakref.ref(held))
        return Workload(lambda: held)

    return Arm(name, build)


def test_every_comparison_drops_its_workloads_before_the_release() -> None:
    watch = _ReleaseWatch()
    bench = Benchmark(name="mem", description="memory", cases=(Case("c", {"n": 1}),),
                      candidate=_arm("ours", watch), baselines=(_arm("theirs", watch),),
                      ceilings=())
    record = run_benchmark(bench, watch, SingleRank(), PROTO)
    comparisons = [c for case in record["cases"] for c in case["comparisons"]]
    # per cache mode: the A/A control and one baseline comparison, two builds each
    assert len(comparisons) == 4 and len(watch.built) == 8
    assert watch.alive_at_release == [0, 0, 0, 0], (
        "the backend released its cache while a comparison's workloads still held their buffers")
