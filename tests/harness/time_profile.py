"""Where a suite's time goes, read from its JUnit reports.

A qualification record keeps, for every pytest suite it ran, the sum of its tests'
times, the slowest tests and the modules that took longest (``time_profile``), and each
phase's wall time. So every GPU run also measures where the time goes (what the goal of a
full single-GPU verdict in a few minutes is judged on): which modules and which first uses
of a kernel (compilation happens inside the first test that launches it) dominate, and how
far the sum of test times is above the wall time (how well the workers overlap). Where
the tests report it (``tests.harness.compile_clock``: the JUnit properties ``compile_s`` and
``compiles``), it also sums the seconds spent compiling kernels, in all and per module, and
where compiles were shared (``tests.harness.compile_share``: ``compile_hits``) how many the
shared cache served.

pytest writes each test's setup, call and teardown seconds as one ``time`` attribute; a
test without one counts 0. ``python -m tests.harness.time_profile REPORT.xml ...`` prints
the same profile as a table.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.harness.junit import case_id, case_module

COMPILE_S = "compile_s"
"""The JUnit property ``compile_clock`` writes: seconds the test spent inside ``cute.compile``
(defined here, where it is read, so that reading a report never imports pytest)."""
COMPILES = "compiles"
"""The JUnit property ``compile_clock`` writes: how many times the test called
``cute.compile``."""
COMPILE_HITS = "compile_hits"
"""The JUnit property ``compile_share`` writes: how many of the test's compiles the run's
shared cache served (written only where compiles are shared)."""
SLOWEST = 25
"""How many of the slowest tests a record keeps."""
MODULES = 20
"""How many of the longest modules a record keeps."""


@dataclass(frozen=True)
class TimeProfile:
    """The time of a set of JUnit reports: ``tests_s`` summed over every test case."""

    tests: int
    tests_s: float
    slowest: tuple[tuple[str, float], ...]
    """(test id, seconds), longest first, at most ``SLOWEST``."""
    modules: tuple[tuple[str, float, int], ...]
    """(module, seconds, tests), longest first, at most ``MODULES``."""
    clocked: int = 0
    """How many tests reported their compile time (``compile_clock``)."""
    compile_s: float = 0.0
    """Seconds those tests spent compiling kernels."""
    compile_modules: tuple[tuple[str, float, int], ...] = ()
    """(module, compile seconds, compiles), longest first, at most ``MODULES``."""
    compile_hits: int = 0
    """How many compiles the run's shared cache served (``compile_share``; 0 when not
    shared)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "tests": self.tests,
            "tests_s": self.tests_s,
            "slowest": [{"test": t, "s": s} for t, s in self.slowest],
            "modules": [{"module": m, "s": s, "tests": n} for m, s, n in self.modules],
            "clocked": self.clocked,
            "compile_s": self.compile_s,
            "compile_modules": [{"module": m, "s": s, "compiles": n}
                                for m, s, n in self.compile_modules],
            "compile_hits": self.compile_hits,
        }


def _seconds(case: ET.Element) -> float:
    try:
        return max(0.0, float(case.get("time", "0") or 0))
    except ValueError:
        return 0.0


def _properties(case: ET.Element) -> dict[str | None, str | None]:
    """The case's JUnit properties, name to value."""
    return {p.get("name"): p.get("value") for p in case.iter("property")}


def _compile_clock(props: dict[str | None, str | None]) -> tuple[float, int] | None:
    """(seconds, calls) of a case's ``compile_clock`` properties, or None without them."""
    if COMPILE_S not in props:
        return None
    try:
        return max(0.0, float(props[COMPILE_S] or 0)), int(props.get(COMPILES) or 0)
    except ValueError:
        return None


def _compile_hits(props: dict[str | None, str | None]) -> int:
    """A case's ``compile_hits`` property, or 0 without it."""
    try:
        return max(0, int(props.get(COMPILE_HITS) or 0))
    except ValueError:
        return 0


def time_profile(paths: Iterable[Path], slowest: int = SLOWEST,
                 modules: int = MODULES) -> TimeProfile:
    """The profile over every test case of ``paths`` (reports that do not exist are
    skipped: a phase that timed out may have written none)."""
    times: list[tuple[str, float]] = []
    per_module: dict[str, list[float]] = defaultdict(list)
    compiling: dict[str, list[tuple[float, int]]] = defaultdict(list)
    hits = 0
    for path in paths:
        if not Path(path).exists():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            s = _seconds(case)
            times.append((case_id(case), s))
            per_module[case_module(case)].append(s)
            props = _properties(case)
            clock = _compile_clock(props)
            if clock is not None:
                compiling[case_module(case)].append(clock)
            hits += _compile_hits(props)
    longest = sorted(times, key=lambda t: (-t[1], t[0]))[:slowest]
    mods = sorted(((m, sum(v), len(v)) for m, v in per_module.items()),
                  key=lambda t: (-t[1], t[0]))[:modules]
    compile_mods = sorted(((m, sum(s for s, _ in v), sum(n for _, n in v))
                           for m, v in compiling.items()), key=lambda t: (-t[1], t[0]))
    return TimeProfile(len(times), round(sum(s for _, s in times), 3),
                       tuple((t, round(s, 3)) for t, s in longest),
                       tuple((m, round(s, 3), n) for m, s, n in mods),
                       sum(len(v) for v in compiling.values()),
                       round(sum(s for _, s, _ in compile_mods), 3),
                       tuple((m, round(s, 3), n) for m, s, n in compile_mods[:modules]),
                       hits)


def format_profile(profile: TimeProfile, wall_s: float | None = None) -> str:
    """A plain-text table of ``profile`` (and the ratio of test time to ``wall_s``)."""
    head = f"{profile.tests} tests, {profile.tests_s:.1f} s of test time"
    if wall_s:
        head += f" in {wall_s:.1f} s of wall time ({profile.tests_s / wall_s:.1f}x)"
    lines = [head, "", "modules (s, tests):"]
    lines += [f"  {s:9.1f}  {n:5d}  {m}" for m, s, n in profile.modules]
    if profile.clocked:
        lines += ["", f"compiling kernels: {profile.compile_s:.1f} s in {profile.clocked} "
                  "tests that report it"
                  + (f", {profile.compile_hits} compiles served by the shared cache"
                     if profile.compile_hits else "") + "; modules (s, compiles):"]
        lines += [f"  {s:9.1f}  {n:5d}  {m}" for m, s, n in profile.compile_modules]
    lines += ["", "slowest tests (s):"]
    lines += [f"  {s:9.1f}  {t}" for t, s in profile.slowest]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.time_profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JUnit XML reports")
    parser.add_argument("--slowest", type=int, default=SLOWEST,
                        help="how many of the slowest tests to list")
    parser.add_argument("--modules", type=int, default=MODULES,
                        help="how many of the longest modules to list")
    parser.add_argument("--wall", type=float, default=None,
                        help="the run's wall time in seconds, to show the overlap")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.reports if not p.is_file()]
    if missing:
        parser.error(f"no such report: {', '.join(missing)}")
    print(format_profile(time_profile(args.reports, args.slowest, args.modules), args.wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
