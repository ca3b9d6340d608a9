"""``./run_tests.sh multi``: the multi tier in an EP world, started the way ``qualify.py
--suite multi`` starts it (torchrun, one process per rank, a JUnit report per rank, the whole
group under one timeout), without writing a qualification record.

Usage::

    ./run_tests.sh multi [--world-size P] [--mode real|emulated|cpu] [--backend B]
                         [--timeout S] [--output-dir DIR] [-- PYTEST_ARGS...]

The world is chosen and refused exactly as for ``qualify.py`` (``tests.harness.worlds``):
without ``--mode``, ``real`` when the machine has P GPUs of one architecture, else
``emulated`` on one GPU, else a refusal that names ``--mode cpu``. Exit codes: 0 every rank
passed, 1 a rank failed, 2 the world was refused, 124 the group timed out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.harness.environment import collect_environment
from tests.harness.runner import TIMEOUT_EXIT, terminate_groups_on_signals
from tests.harness.strict import STATUS_PASS, STATUS_TIMEOUT
from tests.harness.suite_run import RunContext, run_multi
from tests.harness.worlds import (
    BACKENDS,
    MODES,
    WORLD_SIZES,
    check_world,
    resolve_backend,
    resolve_mode,
)

ROOT = Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="run_tests.sh multi", description=__doc__.split("\n\n")[0])
    ap.add_argument("--world-size", type=int, choices=WORLD_SIZES, default=2, help="ranks")
    ap.add_argument("--mode", choices=MODES, help="real, emulated or cpu (default: from the "
                    "machine, as qualify.py)")
    ap.add_argument("--backend", choices=sorted({b for bs in BACKENDS.values() for b in bs}),
                    help="symmetric memory of the world (default: the mode's first)")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds for the whole group (default 1800)")
    ap.add_argument("--output-dir", type=Path, default=ROOT / "out" / "multi",
                    help="per-rank JUnit reports and the log (default out/multi)")
    return ap


def main(argv: list[str]) -> int:
    own, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (
        argv, [])
    args = build_parser().parse_args(own)
    gpus = collect_environment().get("gpus") or []
    mode = resolve_mode(args.mode, args.world_size, gpus)
    check = check_world(mode, args.backend, args.world_size, gpus)
    if not check.ok:
        print(f"run_tests.sh multi: refused: {check.detail}", file=sys.stderr)
        return 2
    assert mode is not None
    out = args.output_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    from tests.suites import SUITES

    suite = SUITES["multi"]
    suite = type(suite)(**{**suite.__dict__, "extra_args": (*suite.extra_args, *rest)})
    ctx = RunContext(ROOT, sys.executable, out, timeout=args.timeout,
                     world_size=args.world_size, mode=mode,
                     backend=resolve_backend(args.backend, mode))
    with terminate_groups_on_signals():
        run = run_multi(suite, ctx)
    print(run.message)
    print(f"run_tests.sh multi: reports in {out}")
    if run.status == STATUS_TIMEOUT:
        return TIMEOUT_EXIT
    return 0 if run.status == STATUS_PASS else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
