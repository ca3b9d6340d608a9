"""Where one test's time goes (issue 40 item 11): runs a pytest selection in this process under
``cProfile`` and prints the time per package (our ``megamoe``, ``oracle``, the tests, the CuTe
DSL, ``torch``, ``hypothesis``, the rest) and the slowest functions by own and cumulative time.

    python -m devtools.profile_tests [--top N] [--threads K] [--output FILE] -- PYTEST_ARGS...

The suites' time profiles (``qualify.py`` records, ``time_profile``) say which tests and how
much of them is kernel compiles; this says what the rest of a test's time is. One process, no
xdist: the numbers are a test alone on the machine, not beside eleven workers. ``--threads``
sets ``torch.set_num_threads`` first (default: torch's own choice), to see what a worker's
share of the cores does to it."""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections import defaultdict
from pathlib import Path

PACKAGES: tuple[tuple[str, str], ...] = (
    ("/megamoe/", "megamoe"), ("/oracle/", "oracle"), ("/tests/", "tests"),
    ("/fixtures/", "tests"), ("cutlass", "cute-dsl"), ("/torch/", "torch"),
    ("/hypothesis/", "hypothesis"), ("/_pytest/", "pytest"), ("/pluggy/", "pytest"),
)
"""A function's package by a piece of its file's path, first match wins; ``builtin`` for C
functions (their own time is where torch's kernels and the GPU waits show up)."""


def package_of(filename: str) -> str:
    """The package a profiled function's file belongs to (``PACKAGES``)."""
    if filename.startswith("~") or filename.startswith("<"):
        return "builtin"
    for piece, name in PACKAGES:
        if piece in filename:
            return name
    return "other"


def own_time_by_package(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time (``tottime``) per package: they add up to the profiled total."""
    out: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        out[package_of(filename)] += tt
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def report(prof: cProfile.Profile, top: int) -> str:
    """The per-package table and the ``top`` functions by own and by cumulative time."""
    by_package = own_time_by_package(pstats.Stats(prof))
    total = sum(by_package.values())
    lines = [f"profiled: {total:.1f} s of own time", "", "| package | own s | share |",
             "|---|---|---|"]
    for name, s in by_package.items():
        lines.append(f"| {name} | {s:.1f} | {100 * s / max(total, 1e-9):.1f} % |")
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        lines += ["", f"## by {key}", buf.getvalue().split("\n", 6)[-1].rstrip()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--output", type=Path, default=None, help="also write the report here")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    pytest_args = [a for a in args.pytest_args if a != "--"]
    if not pytest_args:
        ap.error("give the pytest selection after --")
    import pytest
    import torch
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    prof = cProfile.Profile()
    rc = prof.runcall(pytest.main, ["-p", "no:xdist", "-p", "no:cacheprovider", *pytest_args])
    text = report(prof, args.top)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n", encoding="utf-8")
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
