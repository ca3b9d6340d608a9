"""Time the oracle's quantizers on a 4096 x 7168 bf16 tensor on one CPU core (issue 2, Performance).

Usage: ``python -m oracle.bench_formats [--repeats N] [--rows R --cols C]``. Prints one line per
quantizer (best of N wall times) and a JSON summary; exits 1 if any best time
is at or over the 5 s budget.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

from oracle.formats import quantize_mxfp8, quantize_nvfp4, safe_fp8_quantize

ROWS, COLS = 4096, 7168
BUDGET_S = 5.0


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--cols", type=int, default=COLS, help="a multiple of 32")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, args.cols, generator=gen).to(torch.bfloat16)
    cases: dict[str, Callable[[], object]] = {
        "mxfp8_e4m3_rceil": lambda: quantize_mxfp8(x),
        "mxfp8_e5m2_floor": lambda: quantize_mxfp8(x, elem="e5m2", mode="floor"),
        "nvfp4": lambda: quantize_nvfp4(x),
        "safe_fp8": lambda: safe_fp8_quantize(x),
    }
    times = {name: _best_time(fn, args.repeats) for name, fn in cases.items()}
    print(f"{args.rows}x{args.cols} bf16, 1 thread, best of {args.repeats} (budget {BUDGET_S} s)")
    for name, t in times.items():
        print(f"  {name:<20s} {t:7.3f} s  {'ok' if t < BUDGET_S else 'OVER BUDGET'}")
    print(json.dumps({"shape": [args.rows, args.cols], "threads": 1, "seconds": times, "budget_s": BUDGET_S}))
    return 0 if all(t < BUDGET_S for t in times.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
