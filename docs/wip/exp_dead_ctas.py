"""Session-24 experiment for the next device call (not a test, not a benchmark of record):
what do the CTAs past the live tiles cost the MX GEMM at one expert?

Session 24 (``exp_fc1_gap.py``, ``docs/perf/session24/fc1-gap.txt``) found the layer's FC1 at
DeepSeek skewed T = 1 (56-58 us, MXFP4 ``m64n64s4wsr``) slower than the benchmark's (40 us)
because of ``M_cap`` alone: the same weights, rows, segments and variant, only the A / out
buffers' ``M_cap`` (the layer's 1024 against the benchmark's 128), and with it the grid
(``M_cap / 64 * N / 64`` CTAs: 1024 against 128; the 896 extra exit after one load). Session
19 measured 0.64 ns per added CTA; this is about 20 ns. Two parts:

1. ``sweep``: the benchmark's one-expert set-up with ``M_cap`` in 128 .. 2048 (FC1 and FC2,
   MXFP4 and MXFP8, the narrow default variants). Linear in the dead CTAs, or a step where
   the grid first exceeds the SM count (132) or the resident slots (3 x 132)?
2. ``placement``: a probe kernel with the GEMM's footprint (288 threads, ``--smem`` bytes of
   dynamic shared memory, so three CTAs per SM) launched with the grids of (1): the "live"
   CTAs (even blocks below the live tiles, as ``locate`` rasters one expert's two M tiles)
   spin for about ``--spin-us``, the others exit at once; every CTA records its SM
   (``%smid``) and its start and end (``%globaltimer``). Reported: how many SMs the live CTAs
   share, the most live CTAs on one SM, and the kernel time; then the same 64 live CTAs
   spaced 1, 3, 4, 8, 16 and 132 blocks apart in the layer's grid (which raster would
   spread them). If a large grid packs live CTAs two or three to an SM, the decode
   warpgroups share an SM and the time grows, which a raster that spreads live tiles (or a
   grid no larger than the live tiles can need) would fix. (One thread of a live CTA
   spins, so the probe's own time does not show sharing: its SM column does.)

    PYTHONPATH=. python3 docs/wip/exp_dead_ctas.py sweep placement
"""

from __future__ import annotations

import argparse
import statistics
import traceback

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass import Int32
from cutlass.cute.runtime import make_ptr

from megamoe.ptx import asm_i32

PROBE_THREADS = 288  # the specialized 64-row MX kernel: decode + MMA warpgroups + producer
PROBE_WORDS = 4  # per CTA: smid, start, end, the spin's result (kept so it is not removed)


def _special(reg: str) -> Int32:
    return asm_i32(f"mov.u32 $0, %{reg};", "=r", [], side_effects=True)


@cute.kernel
def _probe_kernel(out_ptr: cute.Pointer, live_below: Int32, live_step: Int32,
                  spin: Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bid, _, _ = cute.arch.block_idx()
    if tidx == 0:
        out = cute.make_tensor(out_ptr, cute.make_layout(1 << 20))
        smid = _special("smid")
        t0 = _special("globaltimer_lo")
        acc = t0
        n = cutlass.select_((bid < live_below) & (bid % live_step == 0), spin, Int32(0))
        for _ in cutlass.range(n, unroll=1):
            acc = acc * Int32(1103515245) + Int32(12345)
        t1 = _special("globaltimer_lo")
        out[bid * PROBE_WORDS] = smid
        out[bid * PROBE_WORDS + 1] = t0
        out[bid * PROBE_WORDS + 2] = t1
        out[bid * PROBE_WORDS + 3] = acc


def make_probe_launch(smem: int):
    """The probe's host function for ``smem`` bytes of dynamic shared memory per CTA."""

    @cute.jit
    def probe_launch(out_ptr: cute.Pointer, grid: Int32, live_below: Int32,
                     live_step: Int32, spin: Int32, stream: cuda.CUstream):
        _probe_kernel(out_ptr, live_below, live_step, spin).launch(
            grid=[grid, 1, 1], block=[PROBE_THREADS, 1, 1], smem=smem, stream=stream)

    return probe_launch


def compile_probe(smem: int, addr: int = 1 << 20):
    """The probe, compiled (on a CPU too: the offline compile gate's path)."""
    ptr = make_ptr(Int32, addr, cute.AddressSpace.gmem, assumed_align=4)
    return cute.compile(make_probe_launch(smem), ptr, Int32(1), Int32(0), Int32(1), Int32(0),
                        cuda.CUstream(0))


def placement(smem: int, spin_us: float) -> None:
    dev = torch.device("cuda")
    compiled = compile_probe(smem)
    # (name, grid, live CTAs, step): the live CTAs are blocks 0, step, 2 * step, ...; the
    # GEMMs of exp_fc1_gap.py at step 2 (locate's raster of one expert's two M tiles), then
    # the same 64 live CTAs spaced otherwise in the layer's grid
    cases = [("fc1 bench", 128, 64, 2), ("fc1 layer", 1024, 64, 2), ("fc1 M_cap 512", 512, 64, 2),
             ("fc2 bench", 224, 112, 2), ("fc2 layer", 1792, 112, 2),
             ("fc1 layer, live first", 1024, 64, 1), ("fc1 layer, step 3", 1024, 64, 3),
             ("fc1 layer, step 4", 1024, 64, 4), ("fc1 layer, step 8", 1024, 64, 8),
             ("fc1 layer, step 16", 1024, 64, 16), ("fc1 layer, step 132", 1024, 7, 132),
             ("live only", 64, 64, 1)]
    out = torch.zeros(4096 * PROBE_WORDS, dtype=torch.int32, device=dev)
    ptr = make_ptr(Int32, out.data_ptr(), cute.AddressSpace.gmem, assumed_align=4)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    # calibrate the spin: iterations per microsecond, one live CTA alone
    compiled(ptr, 1, 1, 1, 100000, stream)
    torch.cuda.synchronize()
    w = out[:PROBE_WORDS].tolist()
    per_us = 100000 / max(1e-3, ((w[2] - w[1]) & 0xFFFFFFFF) / 1000)
    spin = int(spin_us * per_us)
    print(f"probe: {smem} B shared, {PROBE_THREADS} threads, {per_us:.0f} spins/us, "
          f"spin {spin} (~{spin_us} us)", flush=True)
    print("| case | grid | live CTAs | SMs they use | most on one SM | kernel (us) | "
          "live span (us) |", flush=True)
    for name, grid, n_live, step in cases:
        live_below = n_live * step
        times = []
        for _ in range(5):
            out.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            compiled(ptr, grid, live_below, step, spin, stream)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        rec = out[: grid * PROBE_WORDS].view(grid, PROBE_WORDS).cpu()
        live = [i for i in range(grid) if i < live_below and i % step == 0]
        sms = [int(rec[i, 0]) for i in live]
        per_sm: dict[int, int] = {}
        for s in sms:
            per_sm[s] = per_sm.get(s, 0) + 1
        t0 = min(int(rec[i, 1]) for i in live)
        t1 = max(int(rec[i, 2]) for i in live)
        print(f"| {name} | {grid} | {len(live)} | {len(per_sm)} | {max(per_sm.values())} | "
              f"{statistics.median(times):.1f} | {((t1 - t0) & 0xFFFFFFFF) / 1000:.1f} |",
              flush=True)


def sweep() -> None:
    from megamoe.bench.benchmarks.layer import SHAPES
    from megamoe.bench.layer_stages import _time_graph
    from megamoe.bench.mx_gemm import _weights
    from megamoe.experts import api

    dev = torch.device("cuda")
    s = SHAPES["deepseek"]
    print("| format | gemm | variant | rows | " + " | ".join(
        f"M_cap {m}" for m in (128, 256, 512, 1024, 2048)) + " |", flush=True)
    for kind in ("mxfp4", "mxfp8"):
        for gemm, mode, n, k, odt in (("fc1", "swiglu", 2 * s.inter, s.hidden, torch.float32),
                                      ("fc2", "plain", s.hidden, s.inter, torch.bfloat16)):
            cfg = api.gemm_config(kind, n, 8, k=k)  # the layer's choice at T = 1
            b = _weights(kind, s.experts, n, k, dev)
            for rows in (1, 16):
                counts = torch.zeros(s.experts, dtype=torch.int32)
                counts[0] = rows
                seg, cnt = api.padded_segment_starts(counts).to(dev), counts.to(dev)
                times = []
                for m_cap in (128, 256, 512, 1024, 2048):
                    a = torch.randn(m_cap, k, device=dev).to(torch.bfloat16)
                    dst = torch.zeros(m_cap, n // 2 if mode == "swiglu" else n, dtype=odt,
                                      device=dev)
                    def run(a=a, dst=dst, b=b, seg=seg, cnt=cnt, mode=mode, cfg=cfg) -> None:
                        api.grouped_gemm(a, b, seg, cnt, dst, mode=mode, config=cfg)

                    try:
                        times.append(f"{_time_graph(run, 5, 7) * 1e6:.1f}")
                    except Exception:  # an experiment: report and go on
                        traceback.print_exc()
                        times.append("error")
                print(f"| {kind} | {gemm} | {cfg.name} | {rows} | " + " | ".join(times) + " |",
                      flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("parts", nargs="+", choices=("sweep", "placement"))
    ap.add_argument("--smem", type=int, default=66 * 1024)
    ap.add_argument("--spin-us", type=float, default=40.0)
    args = ap.parse_args()
    for part in args.parts:
        try:
            placement(args.smem, args.spin_us) if part == "placement" else sweep()
        except Exception:  # an experiment: report and go on
            traceback.print_exc()


if __name__ == "__main__":
    main()
