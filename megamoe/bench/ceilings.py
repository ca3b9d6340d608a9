"""Ceilings measured in the same process as the benchmark (DESIGN.md "Measuring").

- ``copy_bw``: a large device-to-device copy; bytes read plus bytes written per second.
- ``bf16_mm``: a large bf16 matrix product (``torch.mm``); FLOP/s with 2*M*N*K FLOPs.
- ``fp8_mm``: the same with e4m3 operands through ``torch._scaled_mm`` (bf16 out),
  recorded as unavailable (with the reason) where the build or device lacks it.
- ``peer_copy_bw`` (EP worlds, ``megamoe.bench.ep_world``): every rank copies one large
  buffer, cut in ``P`` equal chunks, into the ranks' copies of a symmetric buffer (chunk
  ``d`` to rank ``d``, the peers first and itself last: the traffic pattern of an
  all-to-all), all ranks at once; bytes sent per second per rank. Outside an EP world it is
  recorded as unavailable. In an emulated world the "peers" share one GPU, so the value
  is a local copy rate, not a link's.

Inputs are random, never zeros (zeros can run faster than real data).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from megamoe.bench.measure import Measurer
from megamoe.bench.registry import CEILING_NAMES, BuildContext, Workload

UNITS = {"copy_bw": "B/s", "bf16_mm": "FLOP/s", "fp8_mm": "FLOP/s", "peer_copy_bw": "B/s"}


COPY_CEILING_BYTES = 256 * 2**20
"""Bytes per copy of the ``copy_bw`` ceiling on the GPU (quick and full runs alike)."""


@dataclass(frozen=True)
class CeilingSizes:
    """Problem sizes of the ceilings: copy bytes and the square matmul size."""

    copy_bytes: int
    mm_size: int


def ceiling_sizes(backend_kind: str, quick: bool) -> CeilingSizes:
    """Sizes that fill an H200 (full), a shorter version (quick), or tiny ones on the CPU."""
    if backend_kind != "cuda":
        return CeilingSizes(copy_bytes=4 * 2**20, mm_size=128)
    if quick:
        return CeilingSizes(copy_bytes=COPY_CEILING_BYTES, mm_size=4096)
    # 256 MiB copies, not 1 GiB: on the H200 a 1 GiB copy ran at 2.71-2.77 TB/s (read +
    # write) while 256 MiB ran at 4.18 TB/s and the staging benchmark's own copies reached
    # 4.17 TB/s (docs/perf.md, 2026-12-02); a ceiling below what kernels achieve is no ceiling
    return CeilingSizes(copy_bytes=COPY_CEILING_BYTES, mm_size=8192)


def _copy(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
    n = sizes.copy_bytes // 4
    src = torch.randn(n, generator=ctx.generator(), device=ctx.device)
    dst = torch.empty_like(src)
    return Workload(lambda: dst.copy_(src), bytes_moved=2 * n * 4, ceiling="copy_bw")


def _bf16_mm(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
    n = sizes.mm_size
    g = ctx.generator()
    a = torch.randn(n, n, generator=g, device=ctx.device).to(torch.bfloat16)
    b = torch.randn(n, n, generator=g, device=ctx.device).to(torch.bfloat16)
    c = torch.empty(n, n, dtype=torch.bfloat16, device=ctx.device)
    return Workload(lambda: torch.mm(a, b, out=c), flops=2 * n**3, ceiling="bf16_mm")


def _fp8_mm(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
    if not hasattr(torch, "_scaled_mm"):
        raise RuntimeError("torch._scaled_mm is not in this torch build")
    n = sizes.mm_size
    g = ctx.generator()
    a = torch.randn(n, n, generator=g, device=ctx.device).to(torch.float8_e4m3fn)
    # _scaled_mm wants the second operand column-major.
    b = torch.randn(n, n, generator=g, device=ctx.device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), dtype=torch.float32, device=ctx.device)

    def fn() -> torch.Tensor:
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    fn()  # fail here (recorded as unavailable) rather than during capture
    return Workload(fn, flops=2 * n**3, ceiling="fp8_mm")


_PEER_BUFFERS: dict[tuple[int, int], object] = {}
"""One symmetric buffer per (world, size) for the life of the process: allocation is
collective, and the ceiling is measured once per run."""


def _peer_copy(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
    from megamoe.bench.ep_world import current_world

    world = current_world()
    p, r = world.size, world.rank
    chunk = sizes.copy_bytes // p // 16 * 16
    key = (id(world), chunk * p)
    if key not in _PEER_BUFFERS:
        _PEER_BUFFERS[key] = world.allocate(chunk * p)
    buf = _PEER_BUFFERS[key]
    src = torch.randint(0, 256, (chunk * p,), generator=ctx.generator(), device=ctx.device,
                        dtype=torch.uint8)
    pairs = [(buf.peer(d)[r * chunk : (r + 1) * chunk], src[d * chunk : (d + 1) * chunk])  # type: ignore[attr-defined]
             for d in ((r + i) % p for i in range(1, p + 1))]

    def fn() -> None:
        for dst, part in pairs:
            dst.copy_(part)

    return Workload(fn, bytes_sent=chunk * p, ceiling="peer_copy_bw")


CeilingBuilder = Callable[[CeilingSizes, BuildContext], Workload]

CEILING_BUILDERS: Mapping[str, CeilingBuilder] = {
    "copy_bw": _copy,
    "bf16_mm": _bf16_mm,
    "fp8_mm": _fp8_mm,
    "peer_copy_bw": _peer_copy,
}
assert tuple(CEILING_BUILDERS) == CEILING_NAMES


def _shape(name: str, sizes: CeilingSizes) -> dict[str, int]:
    if name in ("copy_bw", "peer_copy_bw"):
        return {"bytes": sizes.copy_bytes}
    return {"m": sizes.mm_size, "n": sizes.mm_size, "k": sizes.mm_size}


def measure_ceiling(
    name: str,
    measurer: Measurer,
    sizes: CeilingSizes,
    ctx: BuildContext,
    builder: CeilingBuilder,
    samples: int,
) -> dict[str, Any]:
    """One ceiling record: value = work / median time, best = work / min time, every sample."""
    entry: dict[str, Any] = {"name": name, "unit": UNITS[name], "shape": _shape(name, sizes)}
    try:
        workload = builder(sizes, ctx)
        (unit,) = measurer.prepare([workload])
    except Exception as e:  # an unavailable ceiling is recorded, never invented
        measurer.backend.release()
        return {**entry, "available": False, "reason": f"{type(e).__name__}: {e}"}
    times = measurer.local_series(unit, samples)
    measurer.backend.release()
    work = workload.work()
    median = statistics.median(times)
    return {
        **entry,
        "available": True,
        "work": work,
        "value": work / median,
        "best": work / min(times),
        "median_s": median,
        "min_s": min(times),
        "max_s": max(times),
        "samples_s": times,
    }


def measure_ceilings(
    names: tuple[str, ...],
    measurer: Measurer,
    sizes: CeilingSizes,
    ctx: BuildContext,
    builders: Mapping[str, CeilingBuilder] = CEILING_BUILDERS,
) -> list[dict[str, Any]]:
    """Records for ``names``, each measured with ``protocol.samples_per_arm`` samples."""
    n = measurer.protocol.samples_per_arm
    return [measure_ceiling(name, measurer, sizes, ctx, builders[name], n) for name in names]
