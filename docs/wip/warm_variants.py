"""Compile MX GEMM variants into the CuTe DSL's disk cache (``CUTE_DSL_CACHE_DIR``) without
allocating any weights: FC1 (``swiglu``, float32 out) and FC2 (``plain``, bf16 out) of a
shape, as ``exp_decode_depth.py`` runs them (its ``gemms``), so a timed run
after it loads instead of compiling. One process per variant, many at once:

    PYTHONPATH=. python3 docs/wip/warm_variants.py --weights mxfp4 --shape deepseek \
        --configs n16s2gemv4
"""

from __future__ import annotations

import argparse

import torch
from exp_decode_depth import gemms  # this script's sibling (docs/wip/ is sys.path[0])

from megamoe.bench.benchmarks.layer import SHAPES
from megamoe.bench.mx_gemm import variants
from megamoe.experts import api


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True, choices=("mxfp4", "mxfp8", "nvfp4"))
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--configs", nargs="+", required=True)
    args = ap.parse_args()
    s, by_name, dev = SHAPES[args.shape], variants(args.weights), torch.device("cuda")
    for name in args.configs:
        for _, mode, n, k, odt in gemms(s):
            api.warmup(mode, n, k, dev, by_name[name], weights=args.weights, out_dtype=odt)
        print(f"{args.weights} {args.shape} {name}: compiled", flush=True)


if __name__ == "__main__":
    main()
