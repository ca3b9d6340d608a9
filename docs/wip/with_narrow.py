"""Run a module's ``main`` with the narrow default's preference list replaced, for this process
only (an A/B of a candidate variant in the whole layer without editing the kernels):

    PYTHONPATH=. python3 docs/wip/with_narrow.py mxfp4=m64n64s4wsrh:3,m64n64s6ws:2 \
        -- megamoe.bench.layer_stages --recipe fp8_mxfp4 --tokens 1 16

Each ``FORMAT=NAME:CTAS,...`` replaces ``MX_NARROW_DEPTHS[FORMAT]``; a name the format does
not compile (``CONFIGS_BY_FORMAT``) is parsed and added for this process, as
``exp_decode_depth.py`` does (``m64n64s6wsh``: ``m64n64s6ws`` with ``KernelConfig.halves``)."""

from __future__ import annotations

import importlib
import sys

from exp_decode_depth import add_variants  # this directory: sys.path[0] for a script

from megamoe.experts import mxfp4_gemm_kernel as mk


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit("usage: with_narrow.py FORMAT=NAME:CTAS,... -- MODULE ARGS...")
    cut = argv.index("--")
    for spec in argv[:cut]:
        fmt, _, rules = spec.partition("=")
        depths = []
        for rule in rules.split(","):
            name, _, ctas = rule.partition(":")
            depths.append((name, int(ctas)))
        add_variants(fmt, [name for name, _ in depths])
        mk.MX_NARROW_DEPTHS[fmt] = tuple(depths)
        print(f"# MX_NARROW_DEPTHS[{fmt}] = {mk.MX_NARROW_DEPTHS[fmt]}", flush=True)
    module = importlib.import_module(argv[cut + 1])
    return int(module.main(argv[cut + 2:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
