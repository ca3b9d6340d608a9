"""Session-21 experiment (not a test, not a benchmark of record): is the MX GEMMs' k-tile
time bound by the TMA pipeline's depth (more stages) or by the decode?

For each case of ``megamoe.bench.mx_gemm``'s routes, every variant in ``--configs`` runs
FC1 and FC2 on the same inputs; its live rows are compared bit for bit with the first
variant's (the K loop is the same in-order sequence of wgmmas, CONTRACTS.md s8; a split-K
variant sums in another order and may differ), then timed as ``mx_gemm`` times (CUDA graph,
median per call, warm L2).

A name that is not among the format's compiled variants (``CONFIGS_BY_FORMAT``) is parsed
(``m64n64s5ws``: 64-row tile, 64 columns, 5 stages, specialized; a trailing ``r``: scale
bytes in registers, ``scale_regs``; a trailing ``h``: the segments' first halves first,
``halves``; then ``b4``: four bf16 B tiles, ``b_tiles``) and added to the format's
variants for this process only, so a depth can be tried without editing the kernels
(``--layer-mcap``: the layer's grid for the case's route capacity instead of one sized to
its live rows):

    PYTHONPATH=. python3 docs/wip/exp_decode_depth.py --weights mxfp8 \
        --configs m64n64s3ws m64n64s4ws m64n64s6ws --cases skewed:1 uniform:16
"""

from __future__ import annotations

import argparse
import re

import torch

from megamoe.bench.benchmarks.layer import SHAPES
from megamoe.bench.layer_stages import _time_graph
from megamoe.bench.mx_gemm import _weights, expert_rows, variants

_NAME = re.compile(r"^(?:m(\d+))?n(\d+)s(\d+)(persist)?(ws)?(r)?(?:k(\d+))?(h)?(?:b(\d+))?$")


def add_variants(weights: str, names: list[str]) -> None:
    """Add each name of ``names`` that the format does not compile to its variants, for this
    process (``_make`` accepts only ``CONFIGS_BY_FORMAT[weights]``)."""
    from megamoe.experts import mxfp4_gemm_kernel as mk
    from megamoe.experts.grouped_gemm_kernel import B_TILES, TILE_M, KernelConfig

    known = {c.name for c in mk.CONFIGS_BY_FORMAT[weights]}
    extra = []
    for name in names:
        if name in known:
            continue
        m = _NAME.match(name)
        if m is None:
            raise SystemExit(f"--configs: cannot parse {name!r}")
        tile_m, tile_n, stages, persist, ws, regs, splits, halves, b_tiles = m.groups()
        cfg = KernelConfig(int(tile_n), int(stages), ws=bool(persist),
                           tile_m=int(tile_m) if tile_m else TILE_M, specialized=bool(ws),
                           splits=int(splits) if splits else 1, scale_regs=bool(regs),
                           halves=bool(halves), b_tiles=int(b_tiles) if b_tiles else B_TILES)
        if cfg.name != name:
            raise SystemExit(f"--configs: {name!r} parses as {cfg.name!r}")
        extra.append(cfg)
    mk.CONFIGS_BY_FORMAT[weights] = (*mk.CONFIGS_BY_FORMAT[weights], *extra)


def gemms(s) -> tuple[tuple[str, str, int, int, torch.dtype], ...]:  # type: ignore[no-untyped-def]
    """The layer's two GEMMs of shape ``s`` as these scripts run them: (name, mode, N, K,
    output dtype), FC1 with float32 output, FC2 with bf16."""
    return (("fc1", "swiglu", 2 * s.inter, s.hidden, torch.float32),
            ("fc2", "plain", s.hidden, s.inter, torch.bfloat16))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="+", required=True)
    ap.add_argument("--cases", nargs="+", default=["skewed:1", "skewed:16", "uniform:1",
                                                     "uniform:16"])
    ap.add_argument("--shape", default="deepseek")
    ap.add_argument("--weights", default="mxfp4", choices=("mxfp4", "mxfp8", "nvfp4"))
    ap.add_argument("--layer-mcap", action="store_true",
                    help="size M_cap (and so the grid) as the layer does for the case's "
                         "route capacity (T * top_k), not for its live rows")
    args = ap.parse_args()
    from megamoe.experts import api

    add_variants(args.weights, args.configs)
    by_name = variants(args.weights)
    dev = torch.device("cuda")
    s = SHAPES[args.shape]
    print("| case | " + " | ".join(args.configs) + " | bitwise equal to first |", flush=True)
    for case in args.cases:
        routes, tokens = case.split(":")
        active, rows = expert_rows(s.experts, s.top_k, int(tokens), routes)
        counts = torch.zeros(s.experts, dtype=torch.int32)
        counts[:active] = rows
        m_cap = api.capacity_rows(int(tokens) * s.top_k if args.layer_mcap
                                  else int(counts.sum()), s.experts)
        seg_h = api.padded_segment_starts(counts)
        live = torch.cat([torch.arange(int(seg_h[e]), int(seg_h[e]) + rows)
                          for e in range(active)]).to(dev)
        seg, cnt = seg_h.to(dev), counts.to(dev)
        gen = torch.Generator(device=dev).manual_seed(5)
        for gemm, mode, n, k, odt in gemms(s):
            b = _weights(args.weights, s.experts, n, k, dev)
            a = torch.randn(m_cap, k, generator=gen, device=dev).to(torch.bfloat16)
            times, ref, same = [], None, []
            for name in args.configs:
                cfg = by_name[name]
                api.warmup(mode, n, k, dev, cfg, weights=args.weights, out_dtype=odt)
                dst = torch.full((m_cap, n // 2 if mode == "swiglu" else n), float("nan"),
                                 dtype=odt, device=dev)

                def run(cfg=cfg, b=b, a=a, dst=dst, mode=mode, seg=seg, cnt=cnt) -> None:
                    api.grouped_gemm(a, b, seg, cnt, dst, mode=mode, config=cfg)

                run()
                torch.cuda.synchronize()
                got = dst.index_select(0, live).view(torch.int32 if odt == torch.float32
                                                     else torch.int16)
                if ref is None:
                    ref = got.clone()
                else:
                    same.append(f"{name}: {bool(torch.equal(got, ref))}")
                times.append(_time_graph(run, 5, 5) * 1e6)
            print(f"| {args.weights} {args.shape} {case} {gemm} ({active}x{rows}) | "
                  + " | ".join(f"{t:.1f}" for t in times) + " | " + ", ".join(same) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
