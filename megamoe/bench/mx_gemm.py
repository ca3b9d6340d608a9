"""The grouped expert GEMM alone, variant against variant (issue 7 diagnostics):
``python -m megamoe.bench.mx_gemm``.

For a ``layer`` benchmark shape (``--shape``) and each token count (``--tokens``), with the
rows per expert of the ``layer`` benchmark's routes (``--routes``: ``uniform``,
``min(E, T*K)`` experts with ``max(1, T*K // E)`` rows each; ``skewed``, one expert with
``T`` rows, as ``fixtures.scenarios``' ``skewed``), FC1 (swiglu, ``N = 2I``, ``K = H``;
float32 out for the MX formats, bf16 for bf16, as the layer writes them) and FC2 (plain,
``N = H``, ``K = I``) run with each variant of ``--configs`` on random weights of the
format ``--weights`` (MX formats: random bytes, names from
``megamoe.experts.mxfp4_gemm_kernel.CONFIGS_BY_FORMAT``, the decode cost does not depend on
the values; ``bf16``: names from ``megamoe.experts.grouped_gemm_kernel.CONFIGS``).
Each call is captured ``calls`` times in one CUDA graph and replayed ``samples`` times; the
median per call is reported (warm L2; ``megamoe.bench.layer_stages._time_graph``). Not the
A/B benchmark method: use it to pick a variant, then confirm with ``layer-<recipe>``.

Writes ``mx_gemm.json`` and ``mx_gemm.md`` into ``--output-dir``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from megamoe.bench.benchmarks.layer import SHAPES
from megamoe.bench.layer_stages import _time_graph, write_results
from megamoe.bench.layer_stages import render as render_stages

_WEIGHTS: dict[tuple, object] = {}
"""The last shape's weights per GEMM, kept across ``--tokens`` (DeepSeek FC1 MXFP4 alone is
3.7 GB of codes)."""


def _weights(kind: str, e: int, n: int, k: int, dev: torch.device):
    """Random weights of ``kind`` for ``e`` experts of ``[n, k]``, drawn on the device (a
    CPU draw of several GB took longer than the timing itself) from a fixed seed, and
    cached per (kind, shape)."""
    from megamoe.experts.mxfp4 import Mxfp4Matrix
    from megamoe.experts.mxfp8 import Mxfp8Matrix
    from megamoe.experts.nvfp4 import Nvfp4Matrix

    key = (kind, e, n, k, str(dev))
    if key in _WEIGHTS:
        return _WEIGHTS[key]
    if len(_WEIGHTS) >= 2:  # FC1 and FC2 of one (kind, shape)
        _WEIGHTS.clear()
    gen = torch.Generator(device=dev).manual_seed(5 + n + k)
    if kind == "bf16":
        w = torch.randn(e, n, k, generator=gen, device=dev, dtype=torch.bfloat16) / k**0.5
        _WEIGHTS[key] = w
        return w

    def rand_bytes(lo: int, hi: int, *shape: int) -> torch.Tensor:
        return torch.randint(lo, hi, shape, dtype=torch.uint8, generator=gen, device=dev)

    if kind == "mxfp4":
        w = Mxfp4Matrix(rand_bytes(0, 256, e, n, k // 2), rand_bytes(120, 131, e, n, k // 32))
    elif kind == "mxfp8":
        w = Mxfp8Matrix(rand_bytes(0, 0x7F, e, n, k), rand_bytes(120, 131, e, n, k // 32))
    else:
        w = Nvfp4Matrix(rand_bytes(0, 256, e, n, k // 2), rand_bytes(0x30, 0x40, e, n, k // 16),
                        torch.ones(e, dtype=torch.float32, device=dev))
    _WEIGHTS[key] = w
    return w


ROUTES = ("uniform", "skewed")


def expert_rows(experts: int, top_k: int, tokens: int, routes: str) -> tuple[int, int]:
    """``(experts with rows, rows each)`` of the ``layer`` benchmark's routes."""
    if routes == "skewed":
        return 1, tokens
    return min(experts, tokens * top_k), max(1, tokens * top_k // experts)


def variants(kind: str) -> dict[str, object]:
    """The compiled variants of the weight format, by name."""
    from megamoe.experts.grouped_gemm_kernel import CONFIGS
    from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT

    return {c.name: c for c in (CONFIGS if kind == "bf16" else CONFIGS_BY_FORMAT[kind])}


def profile(kind: str, shape: str, tokens: int, config_names: Sequence[str], calls: int,
            samples: int, routes: str = "uniform") -> list[dict[str, object]]:
    from megamoe.experts import api

    by_name = variants(kind)
    unknown = [c for c in config_names if c not in by_name]
    if unknown:
        raise SystemExit(f"--configs: {unknown} not among {sorted(by_name)} for {kind}")
    dev = torch.device("cuda", torch.cuda.current_device())
    s = SHAPES[shape]
    active, rows = expert_rows(s.experts, s.top_k, tokens, routes)
    counts = torch.zeros(s.experts, dtype=torch.int32)
    counts[:active] = rows
    m_cap = api.capacity_rows(int(counts.sum()), s.experts)
    seg = api.padded_segment_starts(counts).to(dev)
    counts = counts.to(dev)
    gen = torch.Generator(device=dev).manual_seed(5)
    out: list[dict[str, object]] = []
    fc1_out = torch.bfloat16 if kind == "bf16" else torch.float32
    for gemm, mode, n, k, out_dtype in (("fc1", "swiglu", 2 * s.inter, s.hidden, fc1_out),
                                        ("fc2", "plain", s.hidden, s.inter, torch.bfloat16)):
        b = _weights(kind, s.experts, n, k, dev)
        a = torch.randn(m_cap, k, generator=gen, device=dev).to(torch.bfloat16)
        dst = torch.empty(m_cap, n // 2 if mode == "swiglu" else n, dtype=out_dtype, device=dev)
        times = {}
        for name in config_names:
            cfg = by_name[name]
            api.warmup(mode, n, k, dev, cfg, weights=kind, out_dtype=out_dtype)
            ws = (api.SplitKWorkspace.create(cfg, n, k, m_cap, active * rows, dev)
                  if cfg.splits > 1 else None)  # split-K: partials of the live rows

            def run(cfg=cfg, b=b, a=a, dst=dst, mode=mode, ws=ws) -> None:
                api.grouped_gemm(a, b, seg, counts, dst, mode=mode, config=cfg,
                                 split_workspace=ws)

            times[name] = _time_graph(run, calls, samples)
        out.append({"case": f"{kind} {shape} {routes} T{tokens} {gemm}", "experts": active,
                    "rows_per_expert": rows, "median_s": times})
        print(render(out[-1:]).splitlines()[-1], flush=True)  # progress, should a timeout cut it
    return out


def render(results: Sequence[dict]) -> str:
    """``layer_stages.render`` with the active experts and rows per expert of each case."""
    return render_stages(results, ("experts x rows",
                                   lambda r: f"{r['experts']} x {r['rows_per_expert']}"))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m megamoe.bench.mx_gemm",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", default="mxfp4", choices=("mxfp4", "mxfp8", "nvfp4", "bf16"))
    ap.add_argument("--routes", default="uniform", choices=ROUTES)
    ap.add_argument("--shape", default="deepseek", choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--configs", nargs="+", required=True, help="variant names, e.g. n64s4")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--samples", type=int, default=9)
    ap.add_argument("--output-dir", type=Path, default=Path("out/bench/mx_gemm"))
    args = ap.parse_args(argv)
    results = [r for t in args.tokens
               for r in profile(args.weights, args.shape, t, args.configs, args.calls,
                                args.samples, args.routes)]
    write_results(results, render(results), args.output_dir, "mx_gemm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
