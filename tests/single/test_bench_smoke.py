"""GPU smoke test of the benchmark harness: a copy against itself is noise; a real difference is not.

Runs the registered ``copy`` benchmark's candidate with a short protocol
through the real CUDA backend (CUDA graphs, events, 512 MiB L2 flush).

The A/A controls here time one pair of buffers twice (two builds, two graph
captures, one ``src``/``dst``): they check the harness (order, capture,
events, the judge), not the hardware. Separately allocated 64 MiB copies
differ by where their buffers lie: in session 18 on an H200, eight buffer
pairs' medians spread up to 1.3 %, and the A/A of separate builds came out
``slower`` in 5 of 6 runs, beyond the 0.5 % resolution (docs/perf.md
"Session 18"); one pair of buffers gave noise in 5 of 6 (one cold run read
+1.0 %: a residual not yet explained, recorded there). On an H200 on
2026-12-06 the same residual failed this test once in seven runs, inside a
qualification shard (``faster``, medians 34.93 and 34.72 us, 0.6 %).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest
import torch

from megamoe.bench import (
    Arm,
    BuildContext,
    Case,
    CudaBackend,
    EmulatedRanks,
    Protocol,
    SingleRank,
    Workload,
    get_benchmark,
    run_benchmark,
    validate_record,
)
from megamoe.bench.benchmarks.device_copy import build_copy
from megamoe.bench.output import write_outputs

pytestmark = pytest.mark.timing  # A/A and A/B verdicts: the GPU alone (qualify.py --workers)

MiB = 2**20
PROTO = Protocol(rounds=3, pairs=10, warmup=3, calls_per_sample=5)


def _copy_case() -> Case:
    return Case("64MiB", {"bytes": 64 * MiB}, seed=11)


def _copy_on_one_pair_of_buffers() -> Arm:
    """The ``copy`` candidate whose later builds reuse the first build's buffers (see module doc)."""
    built: dict[tuple[str, int], Workload] = {}

    def build(case: Case, ctx: BuildContext) -> Workload:
        key = (case.name, ctx.rank)
        if key not in built:
            built[key] = build_copy(case, ctx)
        return built[key]

    return Arm("copy", build)


def test_copy_against_itself_comes_out_as_noise(cuda_device: torch.device, tmp_path: Path) -> None:
    bench = dataclasses.replace(
        get_benchmark("copy"), cases=(_copy_case(),), baselines=(), ceilings=("copy_bw",),
        candidate=_copy_on_one_pair_of_buffers(),
    )
    record = run_benchmark(bench, CudaBackend(cuda_device), SingleRank(), PROTO, quick=True)
    validate_record(record)
    for case in record["cases"]:
        (aa,) = case["comparisons"]
        assert aa["kind"] == "aa"
        assert aa["summary"]["verdict"] == "noise", aa["summary"]
    assert record["control_is_noise"] is True
    (ceiling,) = record["ceilings"]
    assert ceiling["available"] and ceiling["value"] > 1e11  # any GPU copies > 100 GB/s
    names = sorted(p.name for p in write_outputs(record, tmp_path))
    assert names == ["copy.json", "copy.md", "copy_ceilings.png", "copy_samples.png"]


def _copy_times(factor: int):  # type: ignore[no-untyped-def]
    def build(case: Case, ctx: BuildContext) -> Workload:
        big = dataclasses.replace(case, shape={"bytes": case.shape["bytes"] * factor})
        return build_copy(big, ctx)

    return build


def test_a_real_difference_is_not_noise(cuda_device: torch.device) -> None:
    # Baseline copies four times the bytes: the candidate must come out faster.
    bench = dataclasses.replace(
        get_benchmark("copy"), cases=(_copy_case(),), ceilings=(),
        candidate=_copy_on_one_pair_of_buffers(),
        baselines=(Arm("copy-4x-bytes", _copy_times(4)),),
    )
    record = run_benchmark(bench, CudaBackend(cuda_device), SingleRank(), PROTO.with_(caches=("warm",)))
    (case,) = record["cases"]
    aa, ab = case["comparisons"]
    # the summaries (gains per round, pair-gain interval, floor) are the diagnosis when it fails
    assert aa["summary"]["verdict"] == "noise", aa
    assert ab["summary"]["verdict"] == "faster" and ab["summary"]["gain"] > 1.0, ab["summary"]


def test_emulated_ranks_sample_is_the_slowest_rank(cuda_device: torch.device) -> None:
    def build(case: Case, ctx: BuildContext) -> Workload:
        return _copy_times(1 + 3 * ctx.rank)(case, ctx)  # rank 1 copies four times the bytes

    bench = dataclasses.replace(
        get_benchmark("copy"), cases=(_copy_case(),), ceilings=(), baselines=(),
        candidate=Arm("copy", build),
    )
    proto = PROTO.with_(caches=("warm",), rounds=2, pairs=4)
    record = run_benchmark(bench, CudaBackend(cuda_device), EmulatedRanks(2), proto)
    validate_record(record)
    per_rank: list[list[float]] = [[], []]
    for r in record["cases"][0]["comparisons"][0]["rounds"]:
        for side in (0, 1):
            for sample, values in zip(r["samples_s"][side], r["rank_samples_s"][side], strict=True):
                assert len(values) == 2 and sample == max(values)
                per_rank[0].append(values[0])
                per_rank[1].append(values[1])
    # rank 1 moves four times the bytes: it is the slowest rank, so it sets the samples
    assert statistics.median(per_rank[1]) > 2 * statistics.median(per_rank[0])
