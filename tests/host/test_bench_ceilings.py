"""Ceilings measured in the same run: formulas with a fake clock, real tiny runs on the CPU."""

from __future__ import annotations

import pytest
import torch

from megamoe.bench.ceilings import (
    CEILING_BUILDERS,
    CeilingSizes,
    ceiling_sizes,
    measure_ceiling,
    measure_ceilings,
)
from megamoe.bench.device import HostBackend
from megamoe.bench.fake import FakeDevice
from megamoe.bench.measure import Measurer
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import SingleRank
from megamoe.bench.registry import CEILING_NAMES, BuildContext, Workload

PROTO = Protocol(rounds=1, pairs=3, warmup=1, calls_per_sample=1, graph=False)
TINY = CeilingSizes(copy_bytes=64 * 1024, mm_size=32)


def test_copy_ceiling_counts_bytes_read_plus_written() -> None:
    backend = HostBackend()
    ctx = BuildContext(backend.device, 0, 1, 0)
    w = CEILING_BUILDERS["copy_bw"](TINY, ctx)
    assert w.bytes_moved == 2 * TINY.copy_bytes and w.ceiling == "copy_bw"


def test_matmul_ceilings_count_two_mnk_flops_on_random_inputs() -> None:
    backend = HostBackend()
    ctx = BuildContext(backend.device, 0, 1, 0)
    w = CEILING_BUILDERS["bf16_mm"](TINY, ctx)
    assert w.flops == 2 * 32**3
    out = w.fn()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert out.abs().sum() > 0  # random operands, never zeros


def test_ceiling_value_is_work_over_median_time() -> None:
    dev = FakeDevice()
    times = iter([3e-3, 1e-3, 2e-3] * 10)

    def builder(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
        return Workload(lambda: dev.clock.advance(next(times)), flops=6_000_000, ceiling="bf16_mm")

    m = Measurer(dev.backend, SingleRank(), PROTO.with_(warmup=0))
    c = measure_ceiling("bf16_mm", m, TINY, BuildContext(dev.backend.device, 0, 1, 0), builder, 3)
    # one untimed run after capture consumes 3e-3; samples are then 1e-3, 2e-3, 3e-3
    assert c["samples_s"] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert c["value"] == pytest.approx(6e6 / 2e-3)
    assert c["best"] == pytest.approx(6e6 / 1e-3)
    assert c["unit"] == "FLOP/s" and c["shape"] == {"m": 32, "n": 32, "k": 32}


def test_an_unavailable_ceiling_is_recorded_with_its_reason_never_invented() -> None:
    dev = FakeDevice()

    def broken(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
        raise NotImplementedError("scaled mm missing")

    m = Measurer(dev.backend, SingleRank(), PROTO)
    c = measure_ceiling("fp8_mm", m, TINY, BuildContext(dev.backend.device, 0, 1, 0), broken, 3)
    assert c["available"] is False and "scaled mm missing" in c["reason"]
    assert "value" not in c


def test_all_ceilings_run_for_real_on_the_cpu_at_tiny_sizes() -> None:
    backend = HostBackend(flush_bytes=1024)
    m = Measurer(backend, SingleRank(), PROTO)
    out = measure_ceilings(CEILING_NAMES, m, TINY, BuildContext(backend.device, 0, 1, 0))
    assert [c["name"] for c in out] == list(CEILING_NAMES)
    for c in out[:2]:
        assert c["available"] and c["value"] > 0 and len(c["samples_s"]) == 3
    assert out[2]["available"] or out[2]["reason"]
    # the peer copy needs an EP world: outside torchrun it is unavailable, and says why
    assert out[3]["name"] == "peer_copy_bw" and not out[3]["available"]
    assert "torchrun" in out[3]["reason"]


H200_L2_BYTES = 60 * 2**20


def test_ceiling_sizes_fill_the_gpu_in_full_runs() -> None:
    full = ceiling_sizes("cuda", quick=False)
    assert full.mm_size == 8192
    # the copy streams HBM (4x past the L2), at the size that measured fastest on the H200
    assert full.copy_bytes >= 4 * H200_L2_BYTES
    assert ceiling_sizes("cuda", quick=True).copy_bytes >= 4 * H200_L2_BYTES
    assert ceiling_sizes("host", quick=False).mm_size <= 256
