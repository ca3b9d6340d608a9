"""The seeds' named suites (``tests.suites.SEED_SUITES``): ``./run_tests.sh mega_sm107`` and
``python qualify.py --suite mega_sm107`` run the same three parts:

- ``single``: the suite's tests under ``tests/single`` and ``tests/property`` (one GPU);
- ``multi``: its tests of the multi tier, in an EP world started by torchrun (real, or
  emulated on one GPU), every rank's every test;
- ``sanitize``: its designated sanitizer cases under each compute-sanitizer tool (the tool's
  planted self-test must be caught first).

Each part is strict (no skips, no empty selection), so a part with no test fails the suite:
the suite promises every item of its table. The architecture a part needs is that of the
MegaMoE backend under test (``--moe-backend``; ours: sm_90a); a machine without it is
refused before anything runs.

Usage::

    ./run_tests.sh mega_sm107 [--world-size P] [--mode real|emulated] [--timeout S]
                              [--output-dir DIR] [--parts single,multi,sanitize]
                              [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from tests.suites import (
    SANITIZE_CASE_PATHS,
    SANITIZE_COVERAGE,
    SANITIZER_TOOLS,
    SEED_SUITES,
    SanitizerCoverage,
    Suite,
)

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("single", "multi", "sanitize")
MAP_ENV = "MEGAMOE_SEED_MAP_OUT"
"""Collect-only runs with ``-p tests.harness.seed_suite`` write ``{suite: {item: [node ids]}}``
as JSON to this path (the host test of the suites' items reads it)."""
PENDING: dict[tuple[str, str], str] = {}
"""Items whose tests wait for a change that cannot land without a GPU record, and why; an
item here that gains a test must leave (the host check fails otherwise)."""


def pytest_collection_modifyitems(session, config, items) -> None:  # type: ignore[no-untyped-def]
    """Plugin hook: write every test's seed-suite items (``MAP_ENV``)."""
    import json
    import os

    out = os.environ.get(MAP_ENV)
    if not out:
        return
    found: dict[str, dict[str, list[str]]] = {name: {} for name in SEED_SUITES}
    for item in items:
        for name in SEED_SUITES:
            for mark in item.iter_markers(name):
                for it in mark.args:
                    found[name].setdefault(str(it), []).append(item.nodeid)
    Path(out).write_text(json.dumps(found))
PART_SEPARATOR = "-"


def part_name(suite: str, part: str) -> str:
    """The record's name of one part: ``mega_sm107-single``."""
    return f"{suite}{PART_SEPARATOR}{part}"


def split_part(name: str) -> tuple[str, str] | None:
    """``(suite, part)`` of a part's name, or None for any other suite name."""
    suite, sep, part = name.partition(PART_SEPARATOR)
    return (suite, part) if sep and suite in SEED_SUITES and part in PARTS else None


def part_kind(name: str) -> str:
    """What a planned run is, whoever's it is: a seed suite's part (``mega_sm107-multi`` ->
    ``multi``), or the suite ``name`` itself for any other."""
    split = split_part(name)
    return name if split is None else split[1]


def single_part(suite: str, extra: tuple[str, ...] = ()) -> Suite:
    """The suite's one-GPU tests (``tests/single``, ``tests/property``)."""
    return Suite(part_name(suite, "single"), f"{suite}: one-GPU tests",
                 paths=("tests/single", "tests/property"),
                 markexpr=f"{suite} and gpu and not multirank and not sanitizer",
                 needs_gpu=True, exclusive_gpu=True, extra_args=extra)


def multi_part(suite: str, extra: tuple[str, ...] = ()) -> Suite:
    """The suite's tests of the multi tier (run by ``suite_run.run_multi``)."""
    return Suite(part_name(suite, "multi"), f"{suite}: the multi tier's tests",
                 paths=("tests/multi",), markexpr=f"{suite} and multirank", needs_gpu=True,
                 exclusive_gpu=True, extra_args=extra)


def sanitize_part(suite: str, tool: str) -> SanitizerCoverage:
    """The suite's sanitizer cases under ``tool`` (its planted self-test first)."""
    base = SANITIZE_COVERAGE[tool]
    return SanitizerCoverage(tool, base.planted, base.planted_report,
                             (base.cases[0], *SANITIZE_CASE_PATHS),
                             markexpr=f"sanitizer and {suite}")


def plan(suite: str, parts: tuple[str, ...] = PARTS,
         tools: tuple[str, ...] = SANITIZER_TOOLS) -> list[tuple[str, str | None]]:
    """``(part name, sanitizer tool)`` pairs in run order."""
    out: list[tuple[str, str | None]] = []
    for part in parts:
        if part == "sanitize":
            out += [(part_name(suite, part), t) for t in tools]
        else:
            out.append((part_name(suite, part), None))
    return out


def run_part(name: str, tool: str | None, ctx, exe: Callable[[], str],  # type: ignore[no-untyped-def]
             extra: tuple[str, ...] = ()):
    """Run one part (``name`` from ``plan``) with ``suite_run``'s runners; returns its
    ``SuiteRun``. ``exe`` finds compute-sanitizer (called for sanitize parts only); ``extra``:
    pytest arguments for the single and multi parts."""
    from tests.harness.suite_run import run_multi, run_pytest_suite, run_sanitize

    split = split_part(name)
    assert split is not None, name
    suite, part = split
    if part == "single":
        return run_pytest_suite(single_part(suite, extra), ctx)
    if part == "multi":
        return run_multi(multi_part(suite, extra), ctx)
    return dataclasses.replace(run_sanitize(sanitize_part(suite, str(tool)), ctx, exe()),
                               name=name)


def build_parser() -> argparse.ArgumentParser:
    from tests.harness.worlds import KERNEL_MODES, WORLD_SIZES

    ap = argparse.ArgumentParser(prog="run_tests.sh <seed suite>",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=sorted(SEED_SUITES))
    ap.add_argument("--world-size", type=int, choices=WORLD_SIZES, default=2,
                    help="ranks of the multi part")
    ap.add_argument("--mode", choices=KERNEL_MODES,
                    help="the multi part's world (default: real with P GPUs, else emulated)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per part")
    ap.add_argument("--output-dir", type=Path, help="reports (default out/<suite>)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"some of {', '.join(PARTS)} (default: all)")
    return ap


def main(argv: list[str]) -> int:
    own, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (
        argv, [])
    args = build_parser().parse_args(own)
    parts = tuple(p for p in args.parts.split(",") if p)
    if not parts or any(p not in PARTS for p in parts):
        print(f"run_tests.sh {args.suite}: --parts takes some of {', '.join(PARTS)}, got "
              f"{args.parts!r}", file=sys.stderr)
        return 2
    from sanitizers.wrapper import find_compute_sanitizer
    from tests.harness.environment import collect_environment
    from tests.harness.runner import terminate_groups_on_signals
    from tests.harness.strict import STATUS_PASS
    from tests.harness.suite_run import RunContext
    from tests.harness.worlds import check_world, resolve_backend, resolve_mode

    gpus = collect_environment().get("gpus") or []
    mode = resolve_mode(args.mode, args.world_size, gpus)
    if "multi" in parts:
        check = check_world(mode, None, args.world_size, gpus)
        if not check.ok:
            print(f"run_tests.sh {args.suite}: refused: {check.detail}", file=sys.stderr)
            return 2
    out = (args.output_dir or ROOT / "out" / args.suite).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(ROOT, sys.executable, out, timeout=args.timeout,
                     world_size=args.world_size, mode=mode or "",
                     backend=resolve_backend(None, mode) if mode else "")
    failed = 0
    with terminate_groups_on_signals():
        for name, tool in plan(args.suite, parts):
            run = run_part(name, tool, ctx, lambda: str(find_compute_sanitizer()), tuple(rest))
            print(run.message, flush=True)
            failed += run.status != STATUS_PASS
    print(f"run_tests.sh {args.suite}: {'pass' if not failed else f'{failed} part(s) failed'}; "
          f"reports in {out}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
