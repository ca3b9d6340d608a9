"""``copy``: a device-to-device copy against itself (and against an eight-launch copy).

The GPU smoke test of the harness: the A/A control (two independent builds
of the same copy) must come out as noise, while the one-launch copy against
the eight-launch copy shows the harness can resolve a real difference where
launch overhead matters (small sizes). Achieved bandwidth counts bytes read
plus bytes written and is compared with the ``copy_bw`` ceiling measured in
the same run; 16 MiB fits in an H200's L2, so warm and cold differ there.
"""

from __future__ import annotations

import torch

from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload, register_benchmark

CHUNKS = 8
MiB = 2**20


def _buffers(case: Case, ctx: BuildContext) -> tuple[torch.Tensor, torch.Tensor]:
    n = case.shape["bytes"] // 4
    src = torch.randn(n, generator=ctx.generator(), device=ctx.device)
    return src, torch.empty_like(src)


def build_copy(case: Case, ctx: BuildContext) -> Workload:
    """One ``copy_`` of the whole buffer."""
    src, dst = _buffers(case, ctx)
    return Workload(lambda: dst.copy_(src), bytes_moved=2 * src.nbytes, ceiling="copy_bw")


def build_chunked_copy(case: Case, ctx: BuildContext) -> Workload:
    """The same bytes in ``CHUNKS`` launches."""
    src, dst = _buffers(case, ctx)
    pairs = list(zip(dst.chunk(CHUNKS), src.chunk(CHUNKS), strict=True))

    def fn() -> None:
        for d, s in pairs:
            d.copy_(s)

    return Workload(fn, bytes_moved=2 * src.nbytes, ceiling="copy_bw")


COPY = register_benchmark(
    Benchmark(
        name="copy",
        description="device-to-device copy vs itself (A/A must be noise) and vs an 8-launch copy",
        cases=(
            # ~3 us per copy: 20 calls per sample keep the event timer's ~0.5 us resolution small
            Case("1MiB", {"bytes": 1 * MiB}, seed=1, quick=True, calls_per_sample=20),
            Case("16MiB", {"bytes": 16 * MiB}, seed=2),
            Case("256MiB", {"bytes": 256 * MiB}, seed=3, quick=True),
            Case("1GiB", {"bytes": 1024 * MiB}, seed=4),
        ),
        candidate=Arm("copy", build_copy),
        baselines=(Arm(f"copy-{CHUNKS}-launches", build_chunked_copy),),
    )
)
