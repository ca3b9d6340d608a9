"""Run a module's ``main`` with the narrow default's preference list replaced, for this process
only (an A/B of a candidate variant in the whole layer without editing the kernels):

    PYTHONPATH=. python3 docs/wip/with_narrow.py mxfp4=m64n64s4wsrh:3,m64n64s6ws:2 \
        -- megamoe.bench.layer_stages --recipe fp8_mxfp4 --tokens 1 16

Each ``FORMAT=NAME:CTAS,...`` replaces ``MX_NARROW_DEPTHS[FORMAT]``; a name must be one of
the format's compiled variants (``CONFIGS_BY_FORMAT``)."""

from __future__ import annotations

import importlib
import sys

from megamoe.experts import mxfp4_gemm_kernel as mk


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit("usage: with_narrow.py FORMAT=NAME:CTAS,... -- MODULE ARGS...")
    cut = argv.index("--")
    for spec in argv[:cut]:
        fmt, _, rules = spec.partition("=")
        names = {cfg.name for cfg in mk.CONFIGS_BY_FORMAT[fmt]}
        depths = []
        for rule in rules.split(","):
            name, _, ctas = rule.partition(":")
            if name not in names:
                raise SystemExit(f"{fmt}: {name!r} is not a compiled variant ({sorted(names)})")
            depths.append((name, int(ctas)))
        mk.MX_NARROW_DEPTHS[fmt] = tuple(depths)
        print(f"# MX_NARROW_DEPTHS[{fmt}] = {mk.MX_NARROW_DEPTHS[fmt]}", flush=True)
    module = importlib.import_module(argv[cut + 1])
    return int(module.main(argv[cut + 2:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
